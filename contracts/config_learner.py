"""The `learner` section of the run config (`LearnerConfig`), with APPO's settings in it (`AppoConfig`,
`learner.appo`), and the checks that need several of their fields (`learner_problems`, which `contracts.validate`
runs).

Apart from `contracts.config`, which imports it from here (and every other module imports it from there), so that
both stay readable.

`learner.algorithm` picks the update (learner/learner.py): impala, one V-trace policy-gradient step per batch; or
appo, PPO's clipped surrogate on V-trace's advantages, several passes over each batch (learner/appo.py). APPO's
settings only mean something under appo: one set with impala is refused naming both flags, as a setting that would
silently do nothing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from levelray.contracts.config_values import Section as _Section
from levelray.contracts.config_values import flag as _flag
from levelray.contracts.plugins import IMPORT_PATH

ALGORITHMS = ("impala", "appo")


@dataclass(frozen=True)
class AppoConfig(_Section):
    """APPO's settings (`learner.algorithm appo`; learner/appo.py says which reference each choice follows)."""

    epochs: int = field(
        default=1,
        metadata=_flag("--ppo-epochs", "APPO: passes over each batch, the log-probabilities and values recomputed at "
                                       "every pass (PPO's epochs; DCD: 5)", min=1),
    )
    minibatches: int = field(
        default=1,
        metadata=_flag("--ppo-minibatches", "APPO: gradient steps per pass, each on a random share of the batch's env "
                                            "columns, whole unrolls with their core_state (PPO's minibatches; DCD: "
                                            "1)", min=1),
    )
    clip: float = field(
        default=0.2,
        metadata=_flag("--ppo-clip", "APPO: PPO's clip epsilon: the ratio pi/pi_old of the learner's policy to its "
                                     "policy at the start of the update stops carrying gradient beyond 1 +- epsilon",
                       above=0.0),
    )
    value_clip: float = field(
        default=0.0,
        metadata=_flag("--value-clip", "APPO: the value prediction's move from the update's start, clipped at this in "
                                       "the value head's units (PopArt's normalised units with "
                                       "learner.value_normalization), PPO's pessimistic max of clipped and unclipped "
                                       "squared errors (DCD: 0.2, its clip_param); 0: off", min=0.0),
    )
    normalize_advantages: bool = field(
        default=False,
        metadata=_flag("--normalize-advantages", "APPO: the policy's advantages standardised to mean 0 and standard "
                                                 "deviation 1 over each batch's trained steps, once per update (DCD)"),
    )


def _check_import_paths(paths: list[str]) -> None:
    """`learner.auxiliary_losses`: each entry's form; whether it imports is checked where the learner is built."""
    for path in paths:
        if not IMPORT_PATH.fullmatch(path):
            raise ValueError(f"expected module:attribute (e.g. my_losses:RewardPrediction), got {path!r}")


@dataclass(frozen=True)
class LearnerConfig(_Section):
    batch_size: int = field(default=2, metadata=_flag("--batch-size", "unrolls per learner batch", min=1))
    algorithm: str = field(
        default="impala",
        metadata=_flag("--algorithm", "the update: impala (one V-trace policy-gradient step per batch) or appo (PPO's "
                       "clipped surrogate on V-trace's advantages, learner.appo.epochs passes over each batch; "
                       "docs/guides/learner.md)", choices=ALGORITHMS),
    )
    appo: AppoConfig = field(default_factory=AppoConfig)  # APPO's settings (`--ppo-*`), with learner.algorithm appo
    num_learners: int = field(
        default=1, metadata=_flag("--num-learners", "learner processes training one policy, each on its own batches "
                                  "of batch_size unrolls, gradients averaged by all-reduce (Ray backend)", min=1)
    )
    num_gpus: float | None = field(
        default=None, metadata=_flag("--learner-gpus", "GPUs Ray reserves for each learner (none: 1 where the "
                                     "cluster has a GPU for every learner, else 0)", min=0.0)
    )
    resources: str = field(
        default="", metadata=_flag("--learner-resources", "custom Ray resources each learner asks for, "
                                   "NAME=AMOUNT[,NAME=AMOUNT] (resources its nodes were started with, to place "
                                   "learners there)")
    )
    optimizer: str = field(default="adam", metadata=_flag("--optimizer", "optimiser", choices=("adam", "rmsprop")))
    learning_rate: float = field(
        default=5e-4, metadata=_flag("--learning-rate", "learning rate (losses are means over T*B)", min=0.0)
    )
    lr_schedule: str = field(
        default="constant",
        metadata=_flag("--lr-schedule", "learning rate over the run: constant, or linear decay to 0 at the budget that "
                       "ends it (total_steps or total_trained_steps)", choices=("constant", "linear")),
    )
    adam_eps: float = field(default=1e-8, metadata=_flag("--adam-eps", "Adam epsilon", min=0.0))
    rmsprop_alpha: float = field(default=0.99, metadata=_flag("--rmsprop-alpha", "RMSprop decay", min=0.0))
    rmsprop_eps: float = field(default=1e-5, metadata=_flag("--rmsprop-eps", "RMSprop epsilon", min=0.0))
    discount: float = field(default=0.99, metadata=_flag("--discount", "discount gamma", min=0.0, max=1.0))
    lambda_: float = field(default=1.0, metadata=_flag("--lambda", "V-trace lambda", min=0.0, max=1.0))
    value_weight: float = field(default=0.5, metadata=_flag("--value-weight", "value loss weight", min=0.0))
    value_normalization: bool = field(
        default=True,
        metadata=_flag(
            "--value-normalization",
            "PopArt: the value head learns targets normalised by running statistics (value loss and "
            "policy-gradient advantages in those units); its outputs are preserved when they change",
        ),
    )
    advantage_scale: str = field(
        default="sigma",
        metadata=_flag("--advantage-scale", "with PopArt, what the policy-gradient advantages are divided by: sigma "
                       "(PopArt-IMPALA: the spread of the value targets) or rms (their root mean square, which does "
                       "not shrink when every return is the same; benchmarks/RESULTS.md, CartPole's late collapse)",
                       choices=("sigma", "rms")),
    )
    popart_beta: float = field(
        default=3e-3, metadata=_flag("--popart-beta", "step size of PopArt's target statistics", min=1e-8, max=1.0)
    )
    entropy_weight: float = field(default=0.01, metadata=_flag("--entropy-weight", "entropy bonus weight", min=0.0))
    action_bound_weight: float = field(
        default=1.0,
        metadata=_flag("--action-bound-weight", "continuous actions: penalty on the Gaussian mean outside the "
                       "action box (squared, in half-widths)", min=0.0),
    )
    clip_rho: float | None = field(default=1.0, metadata=_flag("--clip-rho", "V-trace rho-bar (None: no clip)"))
    clip_c: float | None = field(default=1.0, metadata=_flag("--clip-c", "V-trace c-bar (None: no clip)"))
    clip_pg_rho: float | None = field(default=1.0, metadata=_flag("--clip-pg-rho", "policy-gradient rho clip"))
    grad_clip_type: str = field(
        default="norm", metadata=_flag("--grad-clip-type", "gradient clipping", choices=("norm", "value", "none"))
    )
    grad_clip: float = field(default=40.0, metadata=_flag("--grad-clip", "gradient clip threshold", min=0.0))
    model: str = field(
        default="auto",
        metadata=_flag("--model", "network (not the model loss: that is model_loss.loss): auto picks impala_cnn for "
                       "images, minigrid_cnn for minigrid:<name> and maze:<W>x<H>, mlp otherwise",
                       choices=("auto", "impala_cnn", "minigrid_cnn", "mlp")),
    )
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64], metadata=_flag("--hidden-sizes", "MLP sizes"))
    lstm_size: int = field(
        default=0,
        metadata=_flag("--lstm-size", "units of an LSTM core between the network's torso and its policy and value "
                       "heads, which also reads the previous action and reward (IMPALA's agent); actors carry its "
                       "state per env and reset it at episode starts, unrolls carry it (core_state). 0: a "
                       "feed-forward network", min=0),
    )
    lstm_precision: str = field(
        default="fp32",
        metadata=_flag("--lstm-precision", "the LSTM core's arithmetic in the learner's unrolls: fp32 (whatever "
                       "learner.precision says: a recurrence carries its rounding into every later step), or bf16, "
                       "oneDNN's bf16 LSTM on a CPU with AVX512-BF16 or AMX (the maze update in 0.65-0.86x the "
                       "CPU time, h within ~2e-3 of float64 in the tests; benchmarks/RESULTS.md, 'The learner at "
                       "compiled speed'); actors step the core in fp32", choices=("fp32", "bf16")),
    )
    max_policy_lag: int = field(
        default=100, metadata=_flag("--max-policy-lag", "drop unrolls older than this many versions", min=0)
    )
    queue_size: int | None = field(
        default=None,
        metadata=_flag("--queue-size", "learner inbound queue, in unrolls (None: one batch, so that actors wait for a "
                       "busy learner instead of running ahead: every batch waiting in the queue adds a version to "
                       "the policy lag; measured on the main job, ~3 versions against ~16 with 32 unrolls)", min=1,
                       resumable=True),
    )
    max_nonfinite_updates: int = field(
        default=10,
        metadata=_flag("--max-nonfinite-updates",
                       "stop the job after this many updates in a row with a NaN/Inf loss or gradient", min=1,
                       resumable=True),
    )
    device: str = field(
        default="auto", metadata=_flag("--device", "torch device: auto, cpu, cuda or cuda:N", resumable=True)
    )
    precision: str = field(
        default="auto",
        metadata=_flag("--precision", "the networks' arithmetic: bf16 autocast (parameters, optimiser state, targets "
                       "and losses stay float32), fp32, or auto: bf16 on a device with fast bf16 (a CUDA GPU with "
                       "bf16, a CPU with AVX512-BF16 or AMX) for the networks measured faster in it, fp32 elsewhere",
                       choices=("auto", "fp32", "bf16")),
    )
    compile: bool = field(
        default=False,
        metadata=_flag("--compile", "torch.compile the learner's policy network: off by default, as on the 2-core CPU "
                       "it made every network's update slower or no faster (benchmarks/RESULTS.md, 'bf16 (issue "
                       "30)'); on an H200 it sped the IMPALA CNN's bf16 update ~30% at 256 unrolls a batch and "
                       "slowed it at 32 ('On a GPU, fourth loan'): measure the run's own shape before turning it on"),
    )
    auxiliary_losses: list[str] | None = field(
        default=None,
        metadata=_flag("--auxiliary-loss", "auxiliary losses added to the learner's (none: no others than the model "
                       "loss), each the module:attribute import path of a levelray.learner.auxiliary.AuxiliaryLoss "
                       "class (or of a function of an AuxiliarySetup that returns one), comma-separated; the module "
                       "must import where the learner runs (Architecture, 'Adding an auxiliary loss')",
                       check=_check_import_paths),
    )


def learner_problems(learner: LearnerConfig, envs_per_actor: int) -> list[tuple[tuple[str, ...], str]]:
    """`(dotted paths, message)` for each combination of learner settings that means nothing (`contracts.validate`
    makes them its `Problem`s): an APPO setting with `learner.algorithm impala` (it would change nothing), an
    advantage scale without PopArt, a bf16 LSTM precision without an LSTM or on a GPU, and more APPO minibatches
    than a batch has env columns (`learner.batch_size` x `actors.envs_per_actor`, `envs_per_actor`: a minibatch is
    whole columns, so some would be empty)."""
    found = []
    if learner.algorithm != "appo":
        for f in dataclasses.fields(AppoConfig):
            path, flag, value = f"learner.appo.{f.name}", f.metadata["flag"], getattr(learner.appo, f.name)
            if value != f.default:
                found.append(((path, "learner.algorithm"), (
                    f"{path} = {value} ({flag}) is an APPO setting, but learner.algorithm is {learner.algorithm} "
                    f"(--algorithm), which would ignore it; add --algorithm appo, or leave {flag} out")))
    if learner.advantage_scale != "sigma" and not learner.value_normalization:
        found.append((("learner.advantage_scale", "learner.value_normalization"), (
            f"learner.advantage_scale = {learner.advantage_scale} (--advantage-scale) scales advantages by PopArt's "
            f"statistics, but learner.value_normalization is off (--value-normalization false): advantages are in "
            f"reward units; turn PopArt on, or leave --advantage-scale out")))
    if learner.lstm_precision != "fp32" and not learner.lstm_size:
        found.append((("learner.lstm_precision", "learner.lstm_size"), (
            f"learner.lstm_precision = {learner.lstm_precision} (--lstm-precision) sets the LSTM core's arithmetic, "
            f"but learner.lstm_size is 0 (--lstm-size): the network has no core; add --lstm-size N, or leave "
            f"--lstm-precision out")))
    elif learner.lstm_precision == "bf16" and learner.device.startswith("cuda"):
        found.append((("learner.lstm_precision", "learner.device"), (
            f"learner.lstm_precision = bf16 (--lstm-precision) runs oneDNN's bf16 LSTM on a CPU, but learner.device "
            f"is {learner.device!r}; use --lstm-precision fp32 on a GPU")))
    columns = learner.batch_size * envs_per_actor
    if learner.algorithm == "appo" and learner.appo.minibatches > columns:
        found.append((("learner.appo.minibatches", "learner.batch_size", "actors.envs_per_actor"), (
            f"learner.appo.minibatches = {learner.appo.minibatches} (--ppo-minibatches) is more than the "
            f"{columns} env columns of a batch (learner.batch_size {learner.batch_size} x actors.envs_per_actor "
            f"{envs_per_actor}, --batch-size x --envs-per-actor): a minibatch is whole columns, so some would be "
            f"empty; use at most {columns}")))
    return found

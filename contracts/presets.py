"""Defaults per environment family, the way RL Zoo and RLlib's tuned examples ship them.

`levelray train --env CartPole-v1` with no other flag should train CartPole well, and `--env procgen:bigfish`
procgen well; one set of defaults cannot do both (a CartPole learner is idle at procgen's batch size and
procgen's network is wasted on four numbers). So the config resolves `preset: auto` to the env's family
and fills every key the user did not set (by flag, YAML or, from Python, a dict key or a changed field)
from that family's table below. The resolved config, with the preset's name, is what `config.yaml` holds.

Presets are measured (see `benchmarks/RESULTS.md`) or, for Atari, the IMPALA paper's settings scaled to the
machine as the procgen preset was (its comment says which value comes from where); an env of no family
runs on the general defaults of `contracts.config` and says so (`preset: none`).
"""

from __future__ import annotations

import os
from typing import Any

from levelray.contracts.config import ConfigError, EnvConfig, RunConfig, differing_paths, is_atari, replace_paths

CLASSIC_CONTROL = ("CartPole-", "Acrobot-", "MountainCar-")
# Box-action envs: gymnasium's classic and Box2D ones, and the MuJoCo suite (installed separately).
CONTINUOUS_CONTROL = (
    "Pendulum-", "MountainCarContinuous-", "LunarLanderContinuous-", "BipedalWalker",
    "HalfCheetah-", "Hopper-", "Walker2d-", "Ant-", "Humanoid", "Swimmer-", "Reacher-", "Pusher-",
    "InvertedPendulum-", "InvertedDoublePendulum-",
)


def _actors_for_this_machine() -> int:
    """One env actor per core: measured best on 2 cores (the learner shares a core with an actor)."""
    return max(1, os.cpu_count() or 1)


# The PLR / procgen setting this project was built around: IMPALA CNN, 16 envs per actor.
_PROCGEN: dict[str, Any] = {
    "actors.num_actors": _actors_for_this_machine,
    "actors.envs_per_actor": 16,
    "actors.unroll_length": 20,
    "actors.unrolls_per_submit": 1,
    "learner.model": "impala_cnn",
    "learner.batch_size": 2,
    "learner.learning_rate": 5e-4,
    "learner.entropy_weight": 0.01,
}

# dotted config path -> value, or a function of nothing that gives it (machine-dependent values)
PRESETS: dict[str, dict[str, Any]] = {
    "procgen": _PROCGEN,
    # benchmarks/bench_vs_rllib.py, benchmarks/cartpole_value_scale.py: 8 unrolls per update keep the
    # learner ahead of fast NumPy actors (policy lag ~2.5 versions); 4 unrolls per Ray call amortise it. Advantages
    # divided by the targets' RMS (benchmarks/long_run_stability.py: with PopArt's sigma 5 of 10 CartPole runs
    # collapsed after reaching 475, as sigma shrinks once every episode reaches the time limit; with rms none did,
    # at the cost of reaching 475 ~380k env steps later and a plateau at 450-485: RESULTS, "CartPole's late collapse").
    "classic_control": {
        "env.num_levels": 0,  # levels (reset seeds) do not make CartPole harder: no level service (UNBOUNDED_DEFAULTS)
        "actors.num_actors": _actors_for_this_machine,
        "actors.envs_per_actor": 8,
        "actors.unroll_length": 20,
        "actors.unrolls_per_submit": 4,
        "learner.model": "mlp",
        "learner.hidden_sizes": [64, 64],
        "learner.batch_size": 8,
        "learner.learning_rate": 1e-3,
        "learner.entropy_weight": 0.01,
        "learner.advantage_scale": "rms",
    },
    # benchmarks/RESULTS.md, "Continuous control preset": measured on Pendulum-v1 (the one Box-action env that runs
    # here without Box2D or MuJoCo). A Gaussian policy wants many small updates: one unroll per update (IMPALA takes
    # one gradient step per batch, where PPO would take 10 epochs), no entropy bonus (the std has to shrink to hold
    # the pendulum up; RL Zoo's Pendulum settings have none), lambda 0.95 as GAE-based baselines use. Policy lag
    # hurts a Gaussian policy more than a categorical one (RESULTS), so one actor (a batch-1 learner takes about one
    # actor's output; each extra actor adds lag) and a learner queue of 2 unrolls: with the default 32 a loaded
    # machine let the lag grow to 7-14 versions and a run that had reached -226 fell back to -1,100. The rate decays
    # linearly to 0 over the budget: at a constant rate runs kept swinging back to -800..-1,200 late in training
    # (and a final checkpoint taken in a swing evaluated there).
    "continuous_control": {
        "env.num_levels": 0,
        "actors.num_actors": 1,
        "actors.envs_per_actor": 8,
        "actors.unroll_length": 20,
        "actors.unrolls_per_submit": 1,
        "learner.model": "mlp",
        "learner.hidden_sizes": [64, 64],
        "learner.batch_size": 1,
        "learner.learning_rate": 1e-3,
        "learner.entropy_weight": 0.0,
        "learner.lambda_": 0.95,
        "learner.queue_size": 2,
        "learner.lr_schedule": "linear",
    },
    # benchmarks/RESULTS.md, "MiniGridNet learns" and "PLR vs uniform on MiniGrid": 16 envs per actor and
    # batches of 2 unrolls of 20 steps learn DoorKey-5x5 in ~430k and DoorKey-6x6 in ~1M env steps.
    "minigrid": {
        "actors.num_actors": _actors_for_this_machine,
        "actors.envs_per_actor": 16,
        "actors.unroll_length": 20,
        "actors.unrolls_per_submit": 1,
        "learner.model": "minigrid_cnn",
        "learner.batch_size": 2,
        "learner.learning_rate": 5e-4,
        "learner.entropy_weight": 0.01,
        # returns in [0, 1] are h(x) in [0, 0.42]: atoms 0.05 apart give the model loss's value and reward heads
        # 9 atoms over that range, where MuZero's integer atoms gave 2 (model_targets.make_support)
        "model_loss.support_step": 0.05,
    },
    # Atari (`atari:<game>`, `ALE/<Game>-v5`): IMPALA's Atari settings (Espeholt et al. 2018) where they do not
    # depend on the machine: the IMPALA CNN, unrolls of 20 steps, entropy 0.01 (discount 0.99 and gradient
    # norm clip 40 are already the general defaults). What depends on the machine follows the procgen preset,
    # the same network on frames of similar size ([84, 84, 4] here, [64, 64, 3] there): on 2 cores the learner
    # is the bottleneck (procgen: benchmarks/RESULTS.md), so a batch of 2 unrolls keeps updates frequent,
    # where IMPALA's learner on a GPU took 32. Adam at 5e-4 (the procgen preset's, the PLR paper's): IMPALA's
    # RMSProp 6e-4 was tuned for losses summed over the batch, levelray's are means. Levels do not change an
    # Atari game (the reset seed drives sticky actions and no-op starts): no level service, every episode a
    # fresh seed. Env throughput is measured (benchmarks/RESULTS.md); learning with these values is not yet.
    "atari": {**_PROCGEN, "env.num_levels": 0},
    # DCD's learner for its maze runs (`--preset dcd`, for `maze:*`; facebookresearch/dcd `arguments.py`, `algos/ppo.py`
    # and the maze configs in `train_scripts/grid_configs/minigrid/`), as APPO (learner/appo.py): PPO, 5 epochs of 1
    # minibatch, clip 0.2, the value clipped at the same 0.2 (`clip_value_loss`, on by default) in reward units (no
    # PopArt: DCD's `use_popart` is off), advantages standardised over the batch, Adam at 1e-4 with eps 1e-5, global
    # gradient norm 0.5, entropy 0 (the 60-block configs'), value loss 0.5 (of 0.5 x squared error, as here), GAE
    # lambda 0.95 as V-trace's lambda (at policy lag 0 its value targets are GAE's lambda-returns; the policy's
    # advantage stays V-trace's, docs/guides/learner.md), discount 0.995; 32 envs x 256 steps per update (2 actors x
    # 16 envs, batches of 2 unrolls of 256) and the agent's LSTM of 256 over the whole unroll.
    "dcd": {
        "actors.num_actors": 2,
        "actors.envs_per_actor": 16,
        "actors.unroll_length": 256,
        "actors.unrolls_per_submit": 1,
        "learner.model": "minigrid_cnn",
        "learner.lstm_size": 256,
        "learner.batch_size": 2,
        "learner.algorithm": "appo",
        "learner.appo.epochs": 5,
        "learner.appo.minibatches": 1,
        "learner.appo.clip": 0.2,
        "learner.appo.value_clip": 0.2,
        "learner.appo.normalize_advantages": True,
        "learner.learning_rate": 1e-4,
        "learner.adam_eps": 1e-5,
        "learner.grad_clip": 0.5,
        "learner.entropy_weight": 0.0,
        "learner.value_weight": 0.5,
        "learner.value_normalization": False,
        "learner.lambda_": 0.95,
        "learner.discount": 0.995,
    },
}
PRESET_NAMES = ("auto", "none", *PRESETS)
# Levels (reset seeds) do not make these families harder, so on their unbounded level space (`env.num_levels` 0,
# their presets' value) every episode gets a fresh seed with no level service: domain randomisation, which costs
# nothing per episode. A scored strategy asked for explicitly still gets PLR's level buffer.
UNBOUNDED_DEFAULTS: dict[str, dict[str, Any]] = {
    name: {"levels.strategy": "random"} for name in ("classic_control", "continuous_control", "atari")
}



def _declared(env: EnvConfig) -> tuple[str | None, dict[str, Any]]:
    """The preset an env family declares for its ids (`PRESET`, e.g. the maze family's "minigrid") and what it
    adds to it (`PRESET_DEFAULTS`, and on a fixed level set, `env.num_levels` > 0, `FIXED_SET_DEFAULTS`);
    `(None, {})` where it declares none, or no family takes the id (refused with the ids there are when the env is
    built)."""
    from levelray.contracts.families import family_of

    try:
        found = family_of(env)
    except ValueError:
        return None, {}
    extra = dict(getattr(found, "PRESET_DEFAULTS", {}))
    if env.num_levels > 0:
        extra.update(getattr(found, "FIXED_SET_DEFAULTS", {}))
    return getattr(found, "PRESET", None), extra


def family(env_id: str, env_family: str = "auto") -> str:
    """The preset an env id resolves to under `auto`: the one its env family declares, else by the id ("none"
    when no measured preset fits it)."""
    declared, _ = _declared(EnvConfig(id=env_id, family=env_family))
    if declared is not None:
        return declared
    if env_id.startswith("procgen:"):
        return "procgen"
    if env_id.startswith(CLASSIC_CONTROL):
        return "classic_control"
    if env_id.startswith(CONTINUOUS_CONTROL):
        return "continuous_control"
    if env_id.startswith("minigrid:"):
        return "minigrid"
    if is_atari(env_id):
        return "atari"
    return "none"


def changed_paths(cfg: RunConfig) -> set[str]:
    """Dotted paths whose value differs from `RunConfig()`'s: what a config built in Python has set."""
    return set(differing_paths(cfg, RunConfig()))


def dict_paths(data: dict | None, prefix: str = "") -> set[str]:
    """Dotted paths of the leaves a YAML mapping sets."""
    out: set[str] = set()
    for key, value in (data or {}).items():
        path = f"{prefix}{key}"
        out |= dict_paths(value, f"{path}.") if isinstance(value, dict) else {path}
    return out


def apply_preset(cfg: RunConfig, explicit: set[str]) -> RunConfig:
    """`cfg` with `cfg.preset` resolved (`auto`: by the env's family) and every key not in `explicit` filled
    from that preset; the returned config's `preset` names it."""
    name = family(cfg.env.id, cfg.env.family) if cfg.preset == "auto" else cfg.preset
    if name not in PRESETS and name != "none":
        raise ConfigError(f"preset must be one of {', '.join(PRESET_NAMES)}, got {cfg.preset!r}")
    if name == "dcd" and family(cfg.env.id, cfg.env.family) != "minigrid":
        raise ConfigError(f"preset dcd is DCD's maze learner (minigrid_cnn, an LSTM): for maze:* and minigrid:* envs, "
                          f"not env.id {cfg.env.id}")
    values = {path: value() if callable(value) else value for path, value in PRESETS.get(name, {}).items()
              if path not in explicit}
    if values.get("learner.algorithm", cfg.learner.algorithm) != "appo":  # `--preset dcd --algorithm impala`: its
        values = {path: v for path, v in values.items() if not path.startswith("learner.appo.")}  # other settings
    declared, extra = _declared(cfg.env)
    if name == declared:  # what the family adds to the preset it declares (the maze's discount)
        values.update({path: v for path, v in extra.items() if path not in explicit})
    cfg = replace_paths(cfg, {**values, "preset": name})
    if cfg.env.num_levels == 0:
        unbounded = {path: v for path, v in UNBOUNDED_DEFAULTS.get(name, {}).items() if path not in explicit}
        cfg = replace_paths(cfg, unbounded)
    if cfg.model_loss.loss != "none" and "replay.capacity" not in explicit:
        cfg = replace_paths(cfg, {"replay.capacity": model_replay_capacity(cfg)})
    return cfg


# The model loss learns from replay. Replay keeps unrolls first in, first out, so its capacity is the window of
# data the model trains on: with replay's general 2,000 unrolls, a MiniGrid run (2 fresh unrolls an update) never
# filled it in 1M env steps and the model batch's median age grew with the run (~40% of the run's updates at
# update 263). A window of the newest MODEL_REPLAY_WINDOW_UPDATES updates' unrolls keeps the median age near
# half of it (benchmarks/RESULTS.md, "The model loss the ALF way"), with each unroll still sampled about
# (model batch unrolls / fresh unrolls per update) times, as before: how often data is reused does not depend on
# the capacity, only how old it is when reused.
MODEL_REPLAY_WINDOW_UPDATES = 50


def model_replay_capacity(cfg: RunConfig) -> int:
    """`replay.capacity` (unrolls) for the model loss: the fresh unrolls of `MODEL_REPLAY_WINDOW_UPDATES` updates,
    and at least `replay.min_size`."""
    fresh = cfg.learner.batch_size - int(round(cfg.replay.replay_ratio * cfg.learner.batch_size))
    return max(cfg.replay.min_size, MODEL_REPLAY_WINDOW_UPDATES * max(1, fresh))

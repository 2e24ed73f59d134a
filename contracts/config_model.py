"""The `model_loss` section of the run config (`ModelLossConfig`): the MuZero-style auxiliary loss on the agent's
torso (learner/model_loss.py, README "Model loss (MuZero-style)").

Apart from `contracts.config`, which imports it from here (and every other module imports it from there).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from levelray.contracts.config_values import Section as _Section
from levelray.contracts.config_values import flag as _flag

MODEL_LOSSES = ("none", "muzero")
# The model loss's terms, in the order the learner reports them (`model_<term>_loss` metrics, Prometheus labels).
MODEL_LOSS_TERMS = ("value", "reward", "policy", "game_over", "consistency")

@dataclass(frozen=True)
class ModelLossConfig(_Section):
    """The auxiliary latent-model loss (`learner.model_loss`, README "Model loss (MuZero-style)"). Not `learner.model`,
    which names the network: this section trains a dynamics model and heads on that network's torso."""

    loss: str = field(
        default="none",
        metadata=_flag("--model-loss", "auxiliary model loss on the agent's torso: none, or muzero (dynamics "
                       "unrolled K steps with value/reward/policy heads, trained from replay; no tree search)",
                       choices=MODEL_LOSSES),
    )
    loss_weight: float = field(
        default=1.0, metadata=_flag("--model-loss-weight", "weight of the model loss in the learner's loss", min=0.0)
    )
    optimizer: str = field(
        default="separate",
        metadata=_flag("--model-optimizer", "separate: the model loss's own optimiser (the learner's kind and rate, "
                       "its own moments) and gradient clip over the torso and the model, as ALF's representation "
                       "learner, so its gradients do not shrink V-trace's steps through a shared second moment; "
                       "shared: one optimiser and clip for the sum of both losses", choices=("separate", "shared")),
    )
    grad_clip: float = field(
        default=40.0, metadata=_flag("--model-grad-clip", "the separate optimiser's gradient norm clip", min=0.0)
    )
    batch_size: int = field(
        default=32, metadata=_flag("--model-batch-size", "sequences sampled from replay per update for it", min=1)
    )
    num_unroll_steps: int = field(
        default=5, metadata=_flag("--model-unroll-steps", "K: dynamics steps unrolled per sequence", min=1)
    )
    td_steps: int = field(
        default=5, metadata=_flag("--model-td-steps", "n of the n-step value targets (-1: to the end of the "
                                  "stored sequence)", min=-1)
    )
    recurrent_gradient_scaling: float = field(
        default=0.5,
        metadata=_flag("--model-gradient-scaling", "gradient factor on the latent passed to the next dynamics step "
                       "(the heads read it unscaled; forward unchanged)",
                       min=0.0, max=1.0),
    )
    value_repr: str = field(
        default="categorical",
        metadata=_flag("--model-value-repr", "value and reward heads: categorical (two-hot on a support after "
                       "h(x) = sign(x)(sqrt(abs(x)+1)-1)+0.001x) or scalar (squared error)",
                       choices=("categorical", "scalar")),
    )
    support_size: int = field(
        default=10, metadata=_flag("--model-support-size", "categorical support: atoms -S..S times "
                                   "model_loss.support_step (in h(x) units)", min=1)
    )
    support_step: float = field(
        default=1.0, metadata=_flag("--model-support-step", "spacing of the categorical support's atoms in h(x) "
                                    "units: fit it to the reward scale (the minigrid preset's 0.05 for returns in "
                                    "[0, 1])", min=1e-6)
    )
    hidden_size: int = field(
        default=128, metadata=_flag("--model-hidden-size", "units of the dynamics MLP and of each head", min=1)
    )
    game_over: bool = field(
        default=True, metadata=_flag("--model-game-over", "train a game-over (terminated) head")
    )
    torso_gradient: bool = field(
        default=True, metadata=_flag("--model-torso-gradient", "the model loss trains the agent's torso; false: "
                                     "it reads the torso detached (the model trains, the agent is untouched)")
    )
    consistency_weight: float = field(
        default=0.0,
        metadata=_flag("--model-consistency-weight", "weight of EfficientZero's latent-consistency term (0: off)",
                       min=0.0),
    )
    priority: str = field(
        default="model",
        metadata=_flag("--model-priority", "replay priorities: model (sqrt of each sequence's value loss) or td "
                       "(V-trace's abs TD error, as without the model loss)", choices=("model", "td")),
    )
    target_update_period: int = field(
        default=100, metadata=_flag("--model-target-period", "learner updates between target-network updates",
                                    min=1)
    )
    target_update_tau: float = field(
        default=1.0, metadata=_flag("--model-target-tau", "target update: (1-tau)*target + tau*online (1: copy)",
                                    min=0.0, max=1.0)
    )
    reanalyze_ratio: float = field(
        default=0.0,
        metadata=_flag("--model-reanalyze-ratio", "fraction of each model batch whose value and policy targets the "
                       "target network recomputes (else: values stored when fresh, behaviour logits)",
                       min=0.0, max=1.0),
    )
    max_bootstrap_age: float = field(
        default=0.0,
        metadata=_flag("--model-max-bootstrap-age", "dynamic horizon: td steps shrink linearly to "
                       "model_loss.min_td_steps at this age in learner updates (0: off)", min=0.0),
    )
    min_td_steps: int = field(
        default=1, metadata=_flag("--model-min-td-steps", "dynamic horizon: td steps of the oldest data", min=1)
    )

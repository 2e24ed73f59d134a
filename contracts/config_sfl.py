"""The `levels.sfl` section of the run config (`SflConfig`): Sampling For Learnability's settings, read by the level
source `--level-source sfl` (`level_service.sfl`) and by nothing else. Imported from `contracts.config` like every
section; it sits inside `levels` because a level source is built from, and saves, the `levels` section alone.

SFL (Rutherford et al., "No Regrets", NeurIPS 2024; `amacrutherford/sampling-for-learnability`,
`sfl/train/minigrid_sfl.py`) measures the current policy's success rate p on a batch of random levels, keeps the
levels of highest learnability p(1 - p), and trains on a mix of those and fresh random levels until the next batch.
Its MiniGrid settings (`sfl/train/config/minigrid-sfl.yaml`, `learning/ippo-minigrid.yaml`) are sized for a GPU
stepping 25,000 levels at once; the defaults here keep its proportions where they are about selection (the 50/50
mix, 8 or more episodes a level) and scale its volume to a CPU machine (docs/guides/curricula.md, "SFL").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from levelray.contracts.config_values import Section as _Section
from levelray.contracts.config_values import flag as _flag


@dataclass(frozen=True)
class SflConfig(_Section):
    """SFL's batch, buffer, mix and period (`--level-source sfl`; ignored by every other level source)."""

    num_candidates: int = field(
        default=1000,
        metadata=_flag("--sfl-candidates", "SFL: random levels whose learnability the current policy measures at "
                                           "each refresh (SFL's NUM_BATCHES x BATCH_SIZE: 5 x 5,000 on MiniGrid, "
                                           "5 x 1,000 on JaxNav); a fixed level set gives at most all its levels",
                       min=1),
    )
    episodes: int = field(
        default=8,
        metadata=_flag("--sfl-episodes", "SFL: episodes played on each candidate, without gradient, for its success "
                                         "rate p (SFL: the episodes of a 2,000-step rollout, up to 10; 8 or more at "
                                         "250 steps an episode)", min=1),
    )
    buffer_size: int = field(
        default=100,
        metadata=_flag("--sfl-buffer-size", "SFL: the candidates of highest learnability p(1 - p) kept to train on "
                                            "(SFL's NUM_TO_SAVE: 1,000 on MiniGrid, 100 on JaxNav)", min=1),
    )
    buffer_fraction: float = field(
        default=0.5,
        metadata=_flag("--sfl-buffer-fraction", "SFL: share of training episodes played on a buffered level (drawn "
                                                "uniformly), the rest on fresh random levels (SFL: 128 of its 256 "
                                                "envs, NUM_ENVS_FROM_SAMPLED)", min=0.0, max=1.0),
    )
    refresh_steps: int = field(
        default=500_000,
        metadata=_flag("--sfl-refresh-steps", "SFL: env steps trained on (episodes of training levels reported) "
                                              "before the next batch of candidates replaces the buffer (SFL: "
                                              "EVAL_FREQ 100 updates x 256 envs x 256 steps = 6.55M)", min=1),
    )
    play_timeout_s: float = field(
        default=30.0,
        metadata=_flag("--sfl-play-timeout", "SFL: seconds without a candidate's play coming back (and with the "
                                             "batch's env steps trained since its last play was handed out) after "
                                             "which the plays still out are given up as lost (an actor killed "
                                             "mid-batch); SFL's one synchronous rollout loses none", min=0.0),
    )

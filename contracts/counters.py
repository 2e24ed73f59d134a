"""The learner's counters: one record, `LearnerCounters`, that `LearnerCore` keeps, and that its stats, a
checkpoint's `counters`, the metrics and a resume all read; how each counter combines is written on its field.

A TypedDict, as the status snapshot is (`contracts.status`): the record crosses Ray as a plain dict (every
learner's, merged by the driver), goes into a checkpoint's `meta.json` under `counters` with these key names, and
`LearnerCoreStats` extends it, so a stats reply carries each counter under the same name.

Each field's `Tally` says how it combines:

- over ranks (several learners, `learner.ranks`): `SUM` where each rank counts what reached it (its actors' env
  steps and episodes, its drops): the job's count is the sum, and a restarted rank other than 0 counts its own
  from 0 again; `SAME` where every rank holds the job's value (the model's version, the samples trained, a skipped
  update, which every rank skips): the largest is kept, never the sum.
- on resume (`learner.core.monotone_counters`): `MAX` raises the checkpoint's value to the job's last report (a
  checkpoint is older than the report, and a counter that stepped back would be a reset to Prometheus);
  `CHECKPOINT` keeps the checkpoint's (the replay feed's updates anneal beta with the replay buffer the
  checkpoint holds).

A count by reason (`dropped`) combines reason by reason.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

from levelray.contracts.config import RunConfig

SUM, SAME = "sum", "same"
MAX, CHECKPOINT = "max", "checkpoint"


@dataclass(frozen=True)
class Tally:
    """How one counter combines: over the ranks of several learners (`SUM` or `SAME`) and on resume (`MAX` or
    `CHECKPOINT`)."""

    over_ranks: str
    on_resume: str = MAX


class LearnerCounters(TypedDict):
    """The learner's counters (`LearnerCore.counters`; a checkpoint's `counters`)."""

    env_steps: Annotated[int, Tally(SUM)]
    episodes: Annotated[int, Tally(SUM)]
    # of those, episodes on a level the level service replayed (Robust PLR trains on these)
    episodes_replayed: Annotated[int, Tally(SUM)]
    unrolls_received: Annotated[int, Tally(SUM)]
    learner_samples_received: Annotated[int, Tally(SUM)]  # env steps in the unrolls that reached the learner
    # of those, the steps that carry gradient in the unrolls it kept (under levels.robust, the replayed levels'):
    # counted on arrival, as env_steps is, so their ratio over any interval is the share of env steps trained on
    learner_samples_with_gradient: Annotated[int, Tally(SUM)]
    learner_version: Annotated[int, Tally(SAME)]  # updates of the model (kept by `Learner.version`)
    samples_trained: Annotated[int, Tally(SAME)]  # kept by `Learner.samples_trained`
    nonfinite_updates: Annotated[int, Tally(SAME)]  # updates skipped for a NaN/Inf loss or gradient
    dropped: Annotated[dict[str, int], Tally(SUM)]  # unrolls dropped, by reason
    # the replay feed's updates (`ReplayFeed.updates`): beta's annealing, so a resume keeps the same IS weights
    replay_updates: Annotated[int, Tally(SAME, on_resume=CHECKPOINT)]


_HINTS = typing.get_type_hints(LearnerCounters, include_extras=True)
TALLIES: dict[str, Tally] = {name: hint.__metadata__[0] for name, hint in _HINTS.items()}
BY_REASON = frozenset(name for name, hint in _HINTS.items() if typing.get_origin(typing.get_args(hint)[0]) is dict)


def zero_counters() -> LearnerCounters:
    """A fresh learner's record: every count 0, no reasons."""
    return typing.cast(LearnerCounters, {name: {} if name in BY_REASON else 0 for name in TALLIES})


def read_counters(saved: Mapping[str, Any] | None) -> LearnerCounters:
    """The record from a checkpoint's `counters` (or `learner.core.monotone_counters`' answer): a field it lacks
    is 0 (no reasons); ValueError naming the field for a value that is not a count."""
    saved = saved or {}
    out = zero_counters()
    for name in TALLIES:
        value = saved.get(name)
        if value is None:
            continue
        try:
            out[name] = {str(k): int(v) for k, v in value.items()} if name in BY_REASON else int(value)
        except (AttributeError, TypeError, ValueError):
            form = "a mapping of reason to count" if name in BY_REASON else "an integer count"
            raise ValueError(f"counters.{name}: expected {form}, got {value!r}") from None
    return out


def budget_reached(cfg: RunConfig, env_steps: int, samples_trained: int) -> bool:
    """Either of the run's budgets is reached: `total_steps` env steps received, or `total_trained_steps` (when
    set) env steps trained on (`samples_trained`). The learner checks it at each arrival and before each batch
    (`LearnerCore.budget_spent`: it then receives nothing more and the actors stop) and the driver after each poll,
    so both stop on the same rule."""
    trained = cfg.total_trained_steps
    return env_steps >= cfg.total_steps or (trained is not None and samples_trained >= trained)


def budget_fraction(cfg: RunConfig, env_steps: int, samples_trained: int) -> float:
    """How much of the run's budget is spent: the larger of `env_steps / total_steps` and, when set,
    `samples_trained / total_trained_steps`, so it reaches 1 with whichever budget ends the run."""
    spent = env_steps / cfg.total_steps
    if cfg.total_trained_steps is not None:
        spent = max(spent, samples_trained / cfg.total_trained_steps)
    return spent


def combine(name: str, values: Iterable[Any], how: Callable[[Iterable[int]], int]) -> Any:
    """Counter `name`'s values (None: absent, 0) combined by `how` (`sum` or `max`); a count by reason reason by
    reason, the reasons in the order they first appear."""
    values = list(values)
    if name not in BY_REASON:
        return how(int(v or 0) for v in values)
    reasons = dict.fromkeys(reason for v in values for reason in (v or {}))
    return {reason: how(int((v or {}).get(reason, 0)) for v in values) for reason in reasons}

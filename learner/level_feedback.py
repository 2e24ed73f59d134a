"""What the learner sends the level service after an update: PLR's per-step inputs for the configured
strategy (`contracts.levels.LevelFeedback`), computed from the learner's own forward pass (not the actors'
stale one).

value_l1 / gae / positive_value_loss use `advantages = v_s - V(x_s)` (V-trace target minus value);
one_step_td_error uses rewards and values `[T+1, B]`; the policy-based strategies use the logits.

Only fresh unrolls are scored: a replayed unroll's episodes were scored when it was fresh, and its
columns would interleave with newer fragments of the same env. Fresh unrolls are grouped so that
no env column appears twice in one `LevelFeedback` (two unrolls of one actor in a batch are consecutive
fragments of the same episodes), in arrival order, so the service stitches episodes correctly.
"""

from __future__ import annotations

import numpy as np

from levelray.contracts.levels import ADVANTAGE_STRATEGIES, LOGIT_STRATEGIES, LevelFeedback
from levelray.learner.batch import Batch
from levelray.learner.learner import StepOutputs

STEP_FIELDS = ("seeds", "dones", "advantages", "logits", "rewards")  # the [T, N, ...] fields; `values` has T+1


def _feedback_for_columns(strategy: str, batch: Batch, outputs: StepOutputs, columns: np.ndarray) -> LevelFeedback:
    """PLR's inputs over `columns` of the batch, with only the fields `strategy` reads."""
    arrays = batch.arrays
    extra: dict[str, np.ndarray] = {}
    if strategy in ADVANTAGE_STRATEGIES:
        extra["advantages"] = outputs.advantages[:, columns]
    elif strategy == "one_step_td_error":
        extra["rewards"] = arrays["rewards"][:, columns]
        extra["values"] = outputs.values[:, columns]
    elif strategy in LOGIT_STRATEGIES:
        extra["logits"] = outputs.dist_params[:, columns]
    return LevelFeedback(
        seeds=arrays["level_seeds"][:, columns],
        dones=(arrays["terminated"] | arrays["truncated"])[:, columns],
        actor_ids=arrays["env_ids"][columns],
        **extra,
    )


def level_feedback(strategy: str, batch: Batch, outputs: StepOutputs) -> list[LevelFeedback]:
    """One `LevelFeedback` per group of consecutive fresh unrolls with distinct env columns."""
    env_ids = batch.arrays["env_ids"]
    groups: list[list[slice]] = []
    seen: set[int] = set()
    for i in range(batch.num_fresh):
        cols = batch.columns(i)
        ids = env_ids[cols].tolist()
        if not groups or seen.intersection(ids):
            groups.append([])
            seen = set()
        groups[-1].append(cols)
        seen.update(ids)
    return [_feedback_for_columns(strategy, batch, outputs, np.concatenate([np.arange(c.start, c.stop) for c in g]))
            for g in groups]


def merge_in_time(feedbacks: list[LevelFeedback]) -> list[LevelFeedback]:
    """Feedbacks sent one after the other, as few as possible: each env column's steps concatenated in order.

    The service stitches a column's episodes across calls by its actor id, so a column's steps from several
    updates in one call mean the same episodes; what it saves is the service's fixed cost per call (a
    fast learner sends tens a second). Columns with the same number of steps share one feedback. A column
    whose level changes between two feedbacks without an episode end (its actor was restarted) starts a new
    series there, in a later feedback, so the service drops the stale fragment as it would have. Feedback
    with `values` (one_step_td_error's bootstrap row) is returned as it is."""
    if len(feedbacks) < 2 or any(f.values is not None or f.actor_ids is None for f in feedbacks):
        return feedbacks
    fields = [name for name in STEP_FIELDS if getattr(feedbacks[0], name) is not None]
    series: dict[int, list[dict[str, list[np.ndarray]]]] = {}  # actor id -> its unbroken runs of steps
    for f in feedbacks:
        arrays = {name: np.asarray(getattr(f, name)) for name in fields}
        for j, actor in enumerate(np.asarray(f.actor_ids).tolist()):
            runs = series.setdefault(actor, [])
            last = runs[-1] if runs else None
            if last is None or (not last["dones"][-1][-1] and last["seeds"][-1][-1] != arrays["seeds"][0, j]):
                runs.append({name: [] for name in fields})
            for name in fields:
                runs[-1][name].append(arrays[name][:, j])
    groups: dict[tuple[int, int], list[tuple[int, dict]]] = {}  # (run index, steps) -> columns
    for actor, runs in series.items():
        for i, run in enumerate(runs):
            groups.setdefault((i, sum(len(x) for x in run["seeds"])), []).append((actor, run))
    return [LevelFeedback(actor_ids=np.array([a for a, _ in cols], dtype=np.int64),
                          **{name: np.stack([np.concatenate(run[name]) for _, run in cols], axis=1) for name in fields})
            for _, cols in sorted(groups.items(), key=lambda item: item[0][0])]

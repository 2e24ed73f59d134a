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


def _feedback_for_columns(strategy: str, batch: Batch, outputs: StepOutputs, columns: slice) -> LevelFeedback:
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
        dones=arrays["terminated"][:, columns] | arrays["truncated"][:, columns],
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
    # a group's unrolls are consecutive: their columns are one slice (a view, not a copy)
    return [_feedback_for_columns(strategy, batch, outputs, slice(g[0].start, g[-1].stop)) for g in groups]


def merge_in_time(feedbacks: list[LevelFeedback]) -> list[LevelFeedback]:
    """Feedbacks sent one after the other, as few as possible: each env column's steps concatenated in order.

    The service stitches a column's episodes across calls by its actor id, so a column's steps from several
    updates in one call mean the same episodes; what it saves is the service's fixed cost per call (a
    fast learner sends tens a second). Columns with the same number of steps share one feedback. A column
    whose level changes between two feedbacks without an episode end (its actor was restarted) starts a new
    series there, in a later feedback, so the service drops the stale fragment as it would have. Feedback
    with `values` (one_step_td_error's bootstrap row), without actor ids or of unequal lengths is returned as
    it is.

    Vectorised: the `G` columns of all feedbacks side by side `[T, G]`; a series is a list of those columns,
    and a group of `R` series of `L` columns each is one fancy index `[T, R, L]`, reordered to `[L * T, R]`.
    """
    if (len(feedbacks) < 2 or any(f.values is not None or f.actor_ids is None for f in feedbacks)
            or len({np.shape(f.seeds)[0] for f in feedbacks}) > 1):
        return feedbacks
    fields = [name for name in STEP_FIELDS if getattr(feedbacks[0], name) is not None]
    wide = {name: np.concatenate([np.asarray(getattr(f, name)) for f in feedbacks], axis=1) for name in fields}
    actors = np.concatenate([np.asarray(f.actor_ids) for f in feedbacks]).tolist()  # [G]
    ended, last_seed, first_seed = wide["dones"][-1].tolist(), wide["seeds"][-1].tolist(), wide["seeds"][0].tolist()
    series: dict[int, list[list[int]]] = {}  # actor id -> its unbroken runs of columns
    for g, actor in enumerate(actors):
        runs = series.setdefault(actor, [])
        if runs and (ended[runs[-1][-1]] or last_seed[runs[-1][-1]] == first_seed[g]):
            runs[-1].append(g)
        else:
            runs.append([g])
    groups: dict[tuple[int, int], list[tuple[int, list[int]]]] = {}  # (run index, columns) -> series
    for actor, runs in series.items():
        for i, run in enumerate(runs):
            groups.setdefault((i, len(run)), []).append((actor, run))
    out = []
    for (_, length), members in sorted(groups.items(), key=lambda item: item[0][0]):
        index = np.array([run for _, run in members])  # [R, L]
        merged = {}
        for name in fields:
            x = np.moveaxis(wide[name][:, index], 2, 0)  # [L, T, R, ...]
            merged[name] = x.reshape(length * x.shape[1], *x.shape[2:])
        out.append(LevelFeedback(actor_ids=np.array([a for a, _ in members], dtype=np.int64), **merged))
    return out

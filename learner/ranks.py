"""What several learners (`learner.num_learners`) report as one: their stats and checkpoint counters merged.

Every rank counts what reached it: its actors' env steps, episodes and unrolls, its drops. Those add up. What
the ranks share (the model's version, the samples trained, which every rank counts for the union of the batches
since `DataParallel.union_count`, a skipped non-finite update, which every rank skips) is the same on every rank:
the largest is kept, never the sum. Which counter is which is written on its field (`contracts.counters`); the
policy-lag histogram's counts and sum add up. The training return is the mean over the ranks' windows, weighted by how
many episodes each holds; the metrics of the last update are rank 0's.
"""

from __future__ import annotations

from typing import Any

from levelray.contracts.counters import BY_REASON, SUM, TALLIES, combine, zero_counters

# Each rank's own counts: summed over the ranks, and counted from 0 again by a restarted rank other than 0.
ADDED = tuple(name for name, tally in TALLIES.items() if tally.over_ranks == SUM)


def _weighted_mean(stats: list[dict[str, Any]], key: str, weight: str) -> float | None:
    pairs = [(s[key], s.get(weight) or 0) for s in stats if s.get(key) is not None]
    total = sum(w for _, w in pairs)
    if not pairs:
        return None
    if total == 0:
        return sum(v for v, _ in pairs) / len(pairs)
    return sum(v * w for v, w in pairs) / total


def merge_counters(counters: list[dict[str, Any]]) -> dict[str, Any]:
    """One checkpoint's counters from every rank's (`LearnerCore.state_dict()["counters"]`), rank 0 first."""
    merged = dict(counters[0])
    for name, tally in TALLIES.items():
        if name in BY_REASON or any(name in c for c in counters):
            merged[name] = combine(name, (c.get(name) for c in counters), sum if tally.over_ranks == SUM else max)
    return merged


def rank_counters(counters: dict[str, Any] | None, rank: int) -> dict[str, Any] | None:
    """The counters rank `rank` restarts from, given the job's (`merge_counters` of a checkpoint): rank 0 carries
    the job's counts, the others start their own from 0 (so their sum stays the job's) with the shared ones."""
    if counters is None or rank == 0:
        return counters
    fresh = zero_counters()
    return {**counters, **{name: fresh[name] for name in ADDED if name in counters or name in BY_REASON}}


def merge_stats(stats: list[dict[str, Any]]) -> dict[str, Any]:
    """The job's learner stats from every rank's `LearnerService.stats()`, rank 0 first, with `learners`: one
    `{rank, node, device, threads, queue_depth, version}` per rank."""
    merged = {**stats[0], **merge_counters(stats)}
    merged["episode_return_mean"] = _weighted_mean(stats, "episode_return_mean", "episode_returns_window")
    merged["episode_length_mean"] = _weighted_mean(stats, "episode_length_mean", "episode_returns_window")
    merged["episode_returns_window"] = sum(int(s.get("episode_returns_window") or 0) for s in stats)
    merged["policy_lag_mean"] = _weighted_mean(stats, "policy_lag_mean", "unrolls_received") or 0.0
    if any("policy_lag_sum" in s for s in stats):
        merged["policy_lag_sum"] = sum(int(s.get("policy_lag_sum", 0)) for s in stats)
    if all(s.get("policy_lag_counts") is not None for s in stats):
        merged["policy_lag_counts"] = [sum(c) for c in zip(*(s["policy_lag_counts"] for s in stats), strict=True)]
    merged["queue_depth"] = sum(int(s.get("queue_depth") or 0) for s in stats)
    errors = [f"rank {r}: {s['error']}" for r, s in enumerate(stats) if s.get("error")]
    merged["error"] = "\n".join(errors) or None
    merged["learners"] = [{"rank": r, "node": s.get("node"), "device": s.get("device"), "threads": s.get("threads"),
                           "queue_depth": s.get("queue_depth"), "version": s.get("learner_version")}
                          for r, s in enumerate(stats)]
    return merged

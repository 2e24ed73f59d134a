"""The learner's counters are one record (`contracts.counters.LearnerCounters`): what a core counts is what its
stats report and its checkpoint holds, under the same key names; a core loaded from those counts on from them, and
a resume treats each counter as its field says."""

from __future__ import annotations

import numpy as np
import pytest

from levelray.contracts.config import RunConfig, replace_paths
from levelray.contracts.counters import TALLIES
from levelray.learner.core import LearnerCore, monotone_counters
from tests.test_learner import VEC, make_batch

# A checkpoint's counters as `meta.json` holds them: these key names are the on-disk format.
SAVED = {"env_steps": 1200, "episodes": 30, "episodes_replayed": 4, "unrolls_received": 100,
         "learner_samples_received": 1200, "learner_samples_with_gradient": 1100, "learner_version": 9,
         "samples_trained": 900, "nonfinite_updates": 1, "dropped": {"policy_lag": 2}, "replay_updates": 7}


def _core() -> LearnerCore:
    return LearnerCore(replace_paths(RunConfig(), {"learner.batch_size": 1, "learner.max_policy_lag": 0}), VEC)


def _unroll(rng, policy_version: int = 0, *, episode: bool = False) -> dict:
    """T=6, B=2: 12 env steps; with `episode`, env 0 ends an episode on a replayed level at t=2."""
    b = make_batch(rng, T=6, B=2)
    b["terminated"][:] = False
    returns, lengths = np.zeros(0), np.zeros(0, dtype=np.int64)
    if episode:
        b["terminated"][2, 0] = True
        b["level_replayed"][:, 0] = True
        returns, lengths = np.array([1.5]), np.array([3])
    return {**b, "policy_version": policy_version, "actor_id": 0, "episode_returns": returns,
            "episode_lengths": lengths}


def test_stats_and_checkpoint_carry_every_counter_under_its_name():
    core, rng = _core(), np.random.default_rng(0)
    first = _unroll(rng, episode=True)
    assert core.accept(first) and core.accept(_unroll(rng))
    assert core.train([first])["version"] == 1
    assert not core.accept(_unroll(rng, policy_version=0))  # lag 1 > max_policy_lag 0: dropped
    core.count_malformed()
    counters = core.state_dict()["counters"]
    assert list(counters) == list(TALLIES)
    assert counters == {"env_steps": 36, "episodes": 1, "episodes_replayed": 1, "unrolls_received": 3,
                        "learner_samples_received": 36, "learner_samples_with_gradient": 24,
                        "learner_version": 1, "samples_trained": core.learner.samples_trained, "nonfinite_updates": 0,
                        "dropped": {"policy_lag": 1, "malformed": 1}, "replay_updates": core.replay_feed.updates}
    assert counters["samples_trained"] > 0
    stats = core.stats()
    assert {name: stats[name] for name in TALLIES} == counters
    counters["dropped"]["malformed"] = 99  # a copy: the core's own counts are not changed through it
    assert core.stats()["dropped"]["malformed"] == 1


def test_the_steps_with_gradient_are_counted_on_arrival_so_the_trained_share_stays_a_share():
    """Under Robust PLR only a replayed level's steps carry gradient; a dropped unroll's carry none. Counted on
    arrival beside `env_steps`, their share over a report interval is at most 1 even while the learner trains a
    backlog of earlier intervals' unrolls (`samples_trained` then grows faster than `env_steps`)."""
    from levelray.deploy.training.reporting import RecentFraction

    core = LearnerCore(replace_paths(RunConfig(), {"learner.batch_size": 1, "learner.max_policy_lag": 0,
                                                   "levels.robust": True}), VEC)
    rng, share = np.random.default_rng(2), RecentFraction()
    backlog = [_unroll(rng, episode=True) for _ in range(3)]  # env 0 of each on a replayed level: 6 of 12 steps
    assert all(core.accept(u) for u in backlog)
    stats = core.stats()
    assert (stats["env_steps"], stats["learner_samples_with_gradient"]) == (36, 18)
    share.update(stats["env_steps"], stats["learner_samples_with_gradient"])
    trained_before = stats["samples_trained"]
    assert core.accept(_unroll(rng))  # no replayed level in it: 12 env steps, none with gradient
    for unroll in backlog:
        core.train([unroll])
    stats = core.stats()
    assert stats["samples_trained"] - trained_before == 18  # the backlog trained within this interval...
    assert share.update(stats["env_steps"], stats["learner_samples_with_gradient"]) == 0.0  # ...arrived before it
    assert not core.accept(_unroll(rng, episode=True))  # lag 3 > 0: dropped, so no step of it counts
    assert core.stats()["learner_samples_with_gradient"] == 18


def test_a_checkpoints_counters_load_and_counting_goes_on_from_them():
    core, rng = _core(), np.random.default_rng(1)
    core.load_state_dict({"learner": None, "counters": SAVED})
    assert core.state_dict()["counters"] == SAVED
    assert core.learner.version == 9 and core.replay_feed.updates == 7
    assert not core.accept(_unroll(rng, policy_version=9 - 1))  # one version behind, with max_policy_lag 0
    core.count_malformed()
    counters = core.stats()
    assert (counters["env_steps"], counters["unrolls_received"], counters["dropped"]) == (
        1212, 101, {"policy_lag": 3, "malformed": 1})
    # counters written without the replay feed's updates anneal beta by the learner version
    older = _core()
    older.load_state_dict({"learner": None, "counters": {k: v for k, v in SAVED.items() if k != "replay_updates"}})
    assert older.replay_feed.updates == 9


@pytest.mark.parametrize("name,value,form", [("env_steps", "many", "an integer count"),
                                             ("dropped", [1], "a mapping of reason to count"),
                                             ("dropped", {"policy_lag": "x"}, "a mapping of reason to count")])
def test_a_counter_that_is_not_a_count_is_refused_naming_it(name, value, form):
    with pytest.raises(ValueError, match=rf"counters\.{name}: expected {form}, got "):
        _core().load_state_dict({"learner": None, "counters": {**SAVED, name: value}})


def test_a_resume_raises_every_counter_to_the_last_report_but_the_replay_feeds_updates():
    seen = {**SAVED, "env_steps": 1500, "learner_version": 12, "replay_updates": 11, "dropped": {"malformed": 1}}
    out = monotone_counters(SAVED, seen)
    assert out == {**SAVED, "env_steps": 1500, "learner_version": 12, "dropped": {"policy_lag": 2, "malformed": 1}}
    assert out["replay_updates"] == 7  # beta anneals with the replay buffer the checkpoint holds


def test_either_budget_ends_the_run_whichever_is_reached_first():
    from levelray.contracts.counters import budget_reached

    env_only = replace_paths(RunConfig(), {"total_steps": 1000})
    assert not budget_reached(env_only, 999, 10**9)  # no trained budget: only env steps count
    assert budget_reached(env_only, 1000, 0)
    both = replace_paths(RunConfig(), {"total_steps": 1000, "total_trained_steps": 400})
    assert not budget_reached(both, 999, 399)
    assert budget_reached(both, 999, 400)  # the trained budget first
    assert budget_reached(both, 1000, 10)  # the env-step budget first
    with pytest.raises(Exception, match="total_trained_steps"):
        replace_paths(RunConfig(), {"total_trained_steps": 0})

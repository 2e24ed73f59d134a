"""What the learner sends PLR: fresh unrolls only, never the same env column twice in one call."""

import numpy as np
import pytest

from levelray.contracts.levels import LevelFeedback
from levelray.learner.batch import Batch
from levelray.learner.learner import StepOutputs
from levelray.learner.level_feedback import level_feedback


def batch_of(env_id_groups, T=3):
    env_ids = np.concatenate([np.asarray(g) for g in env_id_groups])
    B = len(env_ids)
    return {
        "level_seeds": np.tile(np.arange(B), (T, 1)),
        "level_replayed": np.zeros((T, B), dtype=bool),
        "terminated": np.zeros((T, B), bool),
        "truncated": np.zeros((T, B), bool),
        "rewards": np.zeros((T, B), np.float32),
        "env_ids": env_ids,
    }, {"advantages": np.tile(np.arange(B, dtype=np.float32), (T, 1))}


def level_update_calls(strategy, arrays, outputs, widths, num_fresh):
    """`level_feedback` on a batch of unrolls `widths` columns wide, the first `num_fresh` fresh."""
    T, B = arrays["rewards"].shape
    batch = Batch(arrays, fresh=[{}] * num_fresh, bounds=np.cumsum([0, *widths]))
    step = StepOutputs(advantages=outputs["advantages"], abs_td=np.abs(outputs["advantages"]),
                       values=outputs.get("values", np.zeros((T + 1, B), np.float32)),
                       final_values=np.zeros((T, B), np.float32),
                       dist_params=outputs.get("params", np.zeros((T, B, 1), np.float32)), model_priorities=None)
    return level_feedback(strategy, batch, step)


def given(feedback):
    """The fields a `LevelFeedback` carries (the others are None)."""
    return {name for name, value in vars(feedback).items() if value is not None}


def test_two_unrolls_of_one_actor_become_two_calls_in_order():
    batch, outputs = batch_of([[0, 1], [0, 1]])
    calls = level_update_calls("value_l1", batch, outputs, [2, 2], num_fresh=2)
    assert [c.actor_ids.tolist() for c in calls] == [[0, 1], [0, 1]]
    assert [c.advantages[0].tolist() for c in calls] == [[0.0, 1.0], [2.0, 3.0]]


def test_distinct_actors_share_one_call_and_replayed_unrolls_are_not_scored():
    batch, outputs = batch_of([[0, 1], [2, 3], [0, 1]])  # the third unroll is replayed
    calls = level_update_calls("value_l1", batch, outputs, [2, 2, 2], num_fresh=2)
    assert len(calls) == 1 and calls[0].actor_ids.tolist() == [0, 1, 2, 3]
    assert calls[0].seeds.shape == (3, 4)


def test_inputs_follow_the_strategy():
    batch, outputs = batch_of([[0], [1]])
    outputs["values"] = np.zeros((4, 2), np.float32)
    outputs["params"] = np.zeros((3, 2, 5), np.float32)
    (td,) = level_update_calls("one_step_td_error", batch, outputs, [1, 1], 2)
    assert given(td) == {"seeds", "dones", "actor_ids", "rewards", "values"} and td.values.shape == (4, 2)
    (ent,) = level_update_calls("policy_entropy", batch, outputs, [1, 1], 2)
    assert ent.logits.shape == (3, 2, 5)
    (rnd,) = level_update_calls("random", batch, outputs, [1, 1], 2)
    assert given(rnd) == {"seeds", "dones", "actor_ids"}


def _feedback(seeds, dones, ids, rng):
    seeds, dones = np.asarray(seeds), np.asarray(dones, dtype=bool)
    return LevelFeedback(seeds=seeds, dones=dones, actor_ids=np.asarray(ids),
                         advantages=rng.normal(size=seeds.shape))


def test_feedbacks_merged_in_time_score_the_same_episodes():
    """Each column's steps from several updates sent as one series give the level scores, pending fragments and
    dropped fragments that the updates sent one by one give; a column whose level changes without an episode
    end (a restarted actor) starts a second series, in a later feedback."""
    from levelray.contracts.config import LevelConfig
    from levelray.learner.level_feedback import merge_in_time
    from levelray.level_service.sampler import LevelSampler

    rng = np.random.default_rng(0)
    T = 4
    level = {a: 10 * a for a in range(5)}  # every column its own levels: the order of commits cannot matter
    feedbacks = []
    for k in range(6):
        ids = [0, 1, 2] if k % 2 == 0 else [3, 1, 0, 4]  # columns come and go, in other orders
        seeds, dones = np.empty((T, len(ids)), np.int64), rng.random((T, len(ids))) < 0.3
        if k == 4:
            dones[-1, 2] = False  # column 2's episode is still going when its actor restarts
        for j, a in enumerate(ids):
            for t in range(T):
                seeds[t, j] = level[a]
                if dones[t, j]:
                    level[a] += 1
        feedbacks.append(_feedback(seeds, dones, ids, rng))
    restarted = np.array([[77], [77], [77], [77]])  # column 2 plays level 77 without ending its episode first
    feedbacks.append(_feedback(restarted, np.zeros((T, 1)), [2], rng))
    merged = merge_in_time(feedbacks)
    # columns 0 and 1 sent 24 steps, 2, 3 and 4 sent 12 (then 2 restarted): one feedback per length, then the rest
    assert [sorted(f.actor_ids.tolist()) for f in merged] == [[0, 1], [2, 3, 4], [2]]
    assert [f.seeds.shape[0] for f in merged] == [24, 12, 4] and (merged[2].seeds == 77).all()
    one_by_one, at_once = (LevelSampler(range(200), LevelConfig(alpha=1.0), rng=0) for _ in range(2))
    for f in feedbacks:
        one_by_one.update_with_rollouts(f)
    for f in merged:
        at_once.update_with_rollouts(f)
    np.testing.assert_allclose(at_once.scores(), one_by_one.scores(), rtol=1e-12)  # sums in another order
    np.testing.assert_array_equal(at_once.seen(), one_by_one.seen())
    a, b = at_once.counters(), one_by_one.counters()
    assert (a["num_episodes"], a["num_pending"], a["num_dropped_fragments"]) == (
        b["num_episodes"], b["num_pending"], b["num_dropped_fragments"]) and b["num_dropped_fragments"] == 1
    def pending(sampler):
        """{actor id: (level, steps)} and {actor id: score sum} of the sampler's pending fragments."""
        p = sampler.state_dict()["pending"]
        rows = zip(p["actor_ids"], p["levels"].tolist(), p["steps"].tolist(), p["sums"].tolist(), strict=True)
        return {a: (lv, st) for a, lv, st, _ in rows}, dict(zip(p["actor_ids"], p["sums"].tolist(), strict=True))

    (at_once_rows, at_once_sums), (one_rows, one_sums) = pending(at_once), pending(one_by_one)
    assert at_once_rows == one_rows and at_once_sums == pytest.approx(one_sums)


def test_merged_series_are_each_columns_steps_in_order_with_every_field():
    """Every field of the merged feedbacks (logits `[T, N, P]` too) holds, per actor id, exactly that column's
    steps from the feedbacks in the order they were given (no episode end between feedbacks: the seeds
    continue, so each column is one series); feedbacks of unequal lengths are left as they are."""
    from levelray.learner.level_feedback import merge_in_time

    rng = np.random.default_rng(3)
    T, P = 5, 3
    feedbacks = []
    for _ in range(7):
        ids = rng.permutation(6)[: rng.integers(2, 7)]
        seeds = np.tile(100 + ids, (T, 1))
        feedbacks.append(LevelFeedback(seeds=seeds, dones=np.zeros((T, ids.size), bool), actor_ids=ids,
                                       logits=rng.normal(size=(T, ids.size, P)).astype(np.float32)))
    merged = merge_in_time(feedbacks)
    got = {}
    for f in merged:
        assert f.logits.shape == (f.seeds.shape[0], f.actor_ids.size, P)
        for j, a in enumerate(f.actor_ids.tolist()):
            assert a not in got
            got[a] = (f.seeds[:, j], f.logits[:, j])
    for a in range(6):
        cols = [(f.seeds[:, j], f.logits[:, j]) for f in feedbacks for j in np.flatnonzero(f.actor_ids == a)]
        if not cols:
            continue
        np.testing.assert_array_equal(got[a][0], np.concatenate([c[0] for c in cols]))
        np.testing.assert_array_equal(got[a][1], np.concatenate([c[1] for c in cols]))
    assert set(got) == {a for f in feedbacks for a in f.actor_ids.tolist()}
    short = LevelFeedback(seeds=np.full((2, 1), 7), dones=np.zeros((2, 1), bool), actor_ids=np.array([9]),
                          logits=np.zeros((2, 1, P), np.float32))
    assert merge_in_time([*feedbacks, short]) == [*feedbacks, short]

"""What the learner sends PLR: fresh unrolls only, never the same env column twice in one call."""

import numpy as np

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

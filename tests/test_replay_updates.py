"""`benchmarks.replay_updates` retrains a run's config update by update: the inline backend's training is
deterministic (two replays write the same lines), and a change from a version on changes what follows it only."""

import json
from argparse import Namespace

import numpy as np
import yaml

from benchmarks.replay_updates import batch_summary, replay
from levelray.contracts.config import RunConfig, replace_paths, to_dict


def _lines(tmp_path, name: str, **change) -> list[dict]:
    config = tmp_path / "config.yaml"
    cfg = replace_paths(RunConfig(), {"env.id": "CartPole-v1", "backend": "inline", "actors.num_actors": 1,
                                      "actors.envs_per_actor": 4, "actors.unroll_length": 8, "learner.batch_size": 1})
    config.write_text(yaml.safe_dump(to_dict(cfg)))
    out = tmp_path / f"{name}.jsonl"
    args = Namespace(config=str(config), first=2, last=7, jsonl=str(out), change_at=change.get("at", -1),
                     grad_clip=change.get("grad_clip"), entropy_weight=None)
    assert replay(args) == 6
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_a_replay_is_deterministic_and_a_change_alters_only_what_follows(tmp_path):
    first, again = _lines(tmp_path, "a"), _lines(tmp_path, "b")
    assert [line["version"] for line in first] == [2, 3, 4, 5, 6, 7]
    assert first == again
    clipped = _lines(tmp_path, "c", at=5, grad_clip=1e-6)
    assert clipped[:3] == first[:3]  # versions 2-4 trained as before
    assert clipped[3]["grad_norm"] == first[3]["grad_norm"]  # the norm is taken before the clip
    assert clipped[4:] != first[4:]  # after a clipped step the run differs


def test_batch_summary_counts_actions_probabilities_rewards_and_truncations():
    batch = {"actions": np.array([[0, 1], [1, 1]]), "behaviour_params": np.zeros((2, 2, 2), dtype=np.float32),
             "rewards": np.array([[0.0, 1.0], [0.5, 0.0]]), "truncated": np.array([[False, True], [False, False]])}
    assert batch_summary(batch) == {"action_probs": [0.5, 0.5], "actions_taken": [0.25, 0.75], "rewarded_steps": 2,
                                    "truncated_steps": 1}

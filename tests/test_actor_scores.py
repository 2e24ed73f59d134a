"""Levels scored on the actors: each finished episode's score from the acting network, against a float64
reference; the level service takes only per-episode results and refuses bad ones whole."""

import copy

import numpy as np
import pytest
import torch

from levelray.actors.envs import make_env_vector
from levelray.actors.episode_scorer import EpisodeScorer
from levelray.actors.rollout import RolloutWorker
from levelray.contracts.config import EnvConfig, LevelConfig
from levelray.contracts.levels import EpisodeResults
from levelray.level_service.service import LevelServiceCore

GAMMA, LAM = 0.97, 0.9


def _recorded(strategy: str, unrolls: int = 12, T: int = 7):
    """CartPole episodes (about 20 steps, so most span several unrolls of T steps) played by a worker that
    scores them, with every unroll it made."""
    cfg = EnvConfig(id="CartPole-v1")
    scorer = EpisodeScorer(strategy, 3, discount=GAMMA, gae_lambda=LAM)
    worker = RolloutWorker(make_env_vector(cfg, 3, None, seed=1), T, seed=1, scorer=scorer)
    recorded = [worker.unroll() for _ in range(unrolls)]
    return worker, recorded, scorer.take()


def _reference_episodes(worker, recorded, strategy):
    """Per env, each complete episode's score in float64: the model's values (or logits) recomputed in float64
    on the recorded observations, then GAE / TD / the logit score written out step by step."""
    model = copy.deepcopy(worker.model).double()  # the MLP: a policy tower and a value tower on the raw obs
    out = []
    obs = np.concatenate([u["obs"][:-1] for u in recorded])  # [N*T, K, ...]
    rewards = np.concatenate([u["rewards"] for u in recorded]).astype(np.float64)
    dones = np.concatenate([u["terminated"] | u["truncated"] for u in recorded])
    levels = np.concatenate([u["level_seeds"] for u in recorded])
    with torch.no_grad():
        x = torch.from_numpy(obs.reshape(-1, obs.shape[-1])).double()
        logits, values = model.policy(x), model.value(x)[:, 0]
    values = values.numpy().reshape(rewards.shape)
    logits = logits.numpy().reshape(*rewards.shape, -1)
    for k in range(rewards.shape[1]):
        start = 0
        for t in np.flatnonzero(dones[:, k]).tolist():
            r, v, lg = rewards[start:t + 1, k], values[start:t + 1, k], logits[start:t + 1, k]
            out.append((t, k, int(levels[t, k]), _score(strategy, r, v, lg), t + 1 - start))
            start = t + 1
    out.sort(key=lambda e: (e[0], e[1]))
    return out


def _score(strategy, r, v, lg):
    L = len(r)
    v_next = [v[i + 1] if i + 1 < L else 0.0 for i in range(L)]
    delta = [r[i] + GAMMA * v_next[i] - v[i] for i in range(L)]
    if strategy == "one_step_td_error":
        return float(np.mean(np.abs(delta)))
    if strategy == "policy_entropy":
        p = np.exp(lg - lg.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        return float(np.mean(-(p * np.log(p)).sum(axis=1) / np.log(lg.shape[1])))
    adv, acc = [0.0] * L, 0.0
    for i in reversed(range(L)):
        acc = delta[i] + GAMMA * LAM * acc
        adv[i] = acc
    adv = np.array(adv)
    return float(np.mean({"gae": adv, "value_l1": np.abs(adv), "positive_value_loss": np.maximum(adv, 0)}[strategy]))


@pytest.mark.parametrize("strategy", ["positive_value_loss", "gae", "value_l1", "one_step_td_error",
                                      "policy_entropy"])
def test_actor_scores_equal_a_float64_reference_across_unrolls(strategy):
    worker, recorded, results = _recorded(strategy)
    expected = _reference_episodes(worker, recorded, strategy)
    lengths = np.array([e[4] for e in expected])
    assert (lengths > 7).any(), "some episodes must span several unrolls"
    assert results is not None and len(results) == len(expected)
    np.testing.assert_array_equal(results.levels, [e[2] for e in expected])
    np.testing.assert_array_equal(results.lengths, lengths)
    np.testing.assert_allclose(results.scores, [e[3] for e in expected], rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(results.returns, lengths.astype(np.float64))  # CartPole: reward 1 a step


def _results(levels, scores=None, **fields):
    n = len(levels)
    base = {"levels": np.asarray(levels, dtype=np.int64),
            "scores": np.asarray(scores if scores is not None else np.linspace(0.1, 1.0, n)),
            "lengths": np.full(n, 5, dtype=np.int64), "returns": np.zeros(n), "solved": np.zeros(n, dtype=bool)}
    base.update(fields)
    return EpisodeResults(**base)


@pytest.mark.parametrize("space", ["fixed", "buffer"])
def test_the_level_service_refuses_bad_results_naming_the_field_and_changes_nothing(space):
    if space == "fixed":
        service = LevelServiceCore(np.arange(10), LevelConfig(strategy="value_l1"), rng=0)
        unknown = 99
    else:
        service = LevelServiceCore(None, LevelConfig(strategy="positive_value_loss", buffer_size=8), rng=0)
        unknown = -5
    service.report_episodes(_results([1, 2, 3]))
    before = service.state_dict()
    bad = [
        (_results([1, unknown]), "levels"),
        (_results([1, 2], scores=[0.5, np.nan]), "scores"),
        (_results([1, 2], scores=[0.5]), "scores"),
        (_results([1, 2], lengths=np.array([3, 0])), "lengths"),
        (_results([1, 2], returns=np.array([1.0])), "returns"),
        (_results([1, 2], solved=np.array([1, 0])), "solved"),
        (_results(np.zeros((2, 1), dtype=np.int64)), "levels"),
    ]
    for results, field in bad:
        with pytest.raises(ValueError, match=field):
            service.report_episodes(results)
    after = service.state_dict()
    np.testing.assert_array_equal(after["scores"], before["scores"])
    assert after["counts"] == before["counts"]


def test_results_fold_into_scores_in_the_order_they_ended():
    service = LevelServiceCore(np.arange(4), LevelConfig(strategy="value_l1", alpha=0.5), rng=0)
    service.report_episodes(_results([2, 2], scores=[1.0, 3.0]))
    assert service.state_dict()["scores"][2] == pytest.approx(0.5 * (0.5 * 1.0) + 0.5 * 3.0)


def test_actors_score_in_reward_units_under_popart():
    """With PopArt the value head outputs normalised values; the weights the learner publishes output them in
    reward units (mu + sigma v), so an actor's values, which its level scores are made of, are the learner's."""
    from levelray.contracts.config import LearnerConfig
    from levelray.contracts.trajectory import stack_unrolls
    from levelray.learner.learner import Learner

    config = LearnerConfig(value_normalization=True, batch_size=1)
    worker = RolloutWorker(make_env_vector(EnvConfig(id="CartPole-v1"), 3, None, seed=2), 8, learner=config,
                           seed=2, scorer=EpisodeScorer("value_l1", 3, discount=GAMMA, gae_lambda=LAM))
    learner = Learner(worker.spec, config)
    for _ in range(3):  # PopArt's statistics move away from the identity
        learner.update(stack_unrolls([worker.unroll()]))
    mu, sigma = learner.value_norm.mu, learner.value_norm.sigma
    assert abs(mu) > 1e-2 and abs(sigma - 1.0) > 1e-2
    worker.set_weights(*learner.get_weights())
    u = worker.unroll()
    with torch.no_grad():
        normalised = learner.model(torch.from_numpy(u["obs"][:-1].reshape(-1, 4)))[1].numpy().reshape(8, 3)
    np.testing.assert_allclose(worker.last_values, mu + sigma * normalised, rtol=1e-5, atol=1e-4)

"""Atari (`--env atari:<game>`, `ALE/<Game>-v5`) on real ALE envs: names, the preprocessing (frame skipping done
once, sticky actions as v5 defines them, frame stack order), clipped training rewards against unclipped
reported returns, the human-normalised score, and training plus evaluation through the CLI on both backends."""

from __future__ import annotations

import json
import math

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml

from levelray.actors.envs import make_env_vector
from levelray.actors.rollout import RolloutWorker
from levelray.contracts.atari_scores import REFERENCE_SCORES, human_normalized_score
from levelray.contracts.config import EnvConfig, LearnerConfig, RunConfig, replace_paths
from levelray.contracts.trajectory import validate_unroll
from levelray.deploy.cli import main
from levelray.deploy.rundir import RunDir
from levelray.deploy.training.periodic_eval import PeriodicEvaluator
from levelray.families import atari_env
from levelray.families.atari_env import AtariVector
from levelray.policy.models import ImpalaCNN, build_model
from levelray.policy.weights import weights_to_numpy
from tests.support import json_output

NOOP, FIRE = 0, 1


def vector(env_id: str, num_envs: int = 1, seed: int = 7, **cfg) -> AtariVector:
    vec = make_env_vector(EnvConfig(id=env_id, num_levels=0, **cfg), num_envs, lambda k: seed + k)
    assert isinstance(vec, AtariVector)
    return vec


def test_short_name_and_v5_id_are_the_same_env():
    assert atari_env.gymnasium_id("atari:breakout") == "ALE/Breakout-v5"
    assert atari_env.gymnasium_id("atari:SpaceInvaders") == "ALE/SpaceInvaders-v5"
    assert atari_env.gymnasium_id("atari:space_invaders") == "ALE/SpaceInvaders-v5"
    short, full = vector("atari:breakout"), vector("ALE/Breakout-v5")
    try:
        assert short.gym_id == full.gym_id == "ALE/Breakout-v5" and short.game == "breakout"
        assert short.spec == full.spec and short.spec.num_actions == 4  # v5: the minimal action set
        # the same seed and actions play the same game frame for frame
        np.testing.assert_array_equal(short.reset(), full.reset())
        actions = np.random.default_rng(0).integers(0, 4, size=(50, 1))
        for a in actions:
            s, f = short.step(a), full.step(a)
            np.testing.assert_array_equal(s.obs, f.obs)
            assert s.raw_rewards == f.raw_rewards
    finally:
        short.close()
        full.close()


def test_bad_names_say_what_exists():
    with pytest.raises(ValueError, match=r"unknown Atari game 'atari:brekout'\. Did you mean atari:breakout"):
        make_env_vector(EnvConfig(id="atari:brekout"), 1)
    with pytest.raises(ValueError, match=r"Did you mean ALE/Breakout-v5.*atari:<game>"):
        make_env_vector(EnvConfig(id="ALE/Breakot-v5"), 1)
    # ALE's own frame skipping would multiply the preprocessing's: refused, with the ids to use instead
    with pytest.raises(ValueError, match=r"atari:breakout \(= ALE/Breakout-v5.*BreakoutNoFrameskip-v4"):
        make_env_vector(EnvConfig(id="Breakout-v4"), 1)
    with pytest.raises(ValueError, match=r"Did you mean"):
        make_env_vector(EnvConfig(id="ALE/Breakout-v4"), 1)


def test_preprocessing_skips_frames_once_with_v5_sticky_actions():
    vec = vector("atari:breakout")
    nofs = vector("BreakoutNoFrameskip-v4")
    try:
        obs = vec.reset()
        assert obs.shape == (1, 84, 84, 4) and obs.dtype == np.uint8
        assert vec.spec.obs_shape == (84, 84, 4) and vec.spec.obs_dtype == "uint8" and vec.spec.is_image
        env = vec.envs[0]
        base = env.unwrapped
        assert base._frameskip == 1  # AtariPreprocessing does the skipping, the ALE env must not
        pre = env
        while not isinstance(pre, gym.wrappers.AtariPreprocessing):
            pre = pre.env
        assert (pre.frame_skip, pre.noop_max, pre.terminal_on_life_loss) == (4, 30, False)
        # the sticky-action probability ALE itself runs with: v5's 0.25, none for NoFrameskip-v4
        assert base.ale.getFloat("repeat_action_probability") == pytest.approx(0.25)
        nofs.reset()
        assert nofs.envs[0].unwrapped.ale.getFloat("repeat_action_probability") == 0.0
        # one agent step is 4 emulator frames, as ALE/Breakout-v5's frameskip=4 (not 4 x 4)
        for a in (FIRE, 2, 3, NOOP):
            before = base.ale.getEpisodeFrameNumber()
            vec.step(np.array([a]))
            assert base.ale.getEpisodeFrameNumber() - before == 4
        # the model --model auto picks for these frames
        assert isinstance(build_model(vec.spec, "auto"), ImpalaCNN)
    finally:
        vec.close()
        nofs.close()


def test_frame_stack_has_the_newest_frame_last():
    vec = vector("atari:breakout", seed=3)
    # the same game without stacking: the same seed and actions give the same frames (ALE is deterministic
    # given its seed), so its frame is what the stack's newest channel must hold
    single = gym.wrappers.AtariPreprocessing(gym.make("ALE/Breakout-v5", frameskip=1), noop_max=30)
    try:
        obs = vec.reset()[0]
        frame, _ = single.reset(seed=3)
        assert all(np.array_equal(obs[..., c], frame) for c in range(4))  # reset: the first frame repeated
        changed = 0
        for a in [FIRE] + [2, 3] * 20:
            step = vec.step(np.array([a]))
            frame, *_ = single.step(a)
            new = step.obs[0]
            np.testing.assert_array_equal(new[..., 3], frame)  # newest last
            np.testing.assert_array_equal(new[..., :3], obs[..., 1:])  # the rest shifted one towards 0
            changed += not np.array_equal(new[..., 3], new[..., 2])
            obs = new
        assert changed > 10  # the frames really differ, so the order above is tested
    finally:
        vec.close()
        single.close()


def test_training_reward_is_clipped_and_the_reported_return_is_the_game_score():
    """A real Space Invaders episode (aliens are worth 5-30 points) played by the actors' own rollout code with
    an untrained policy: the unroll carries sign(reward) for the learner, the episode return it reports is
    the game's score, checked by replaying the same actions on an unclipped env with the same seed. Losing a
    life does not end the episode."""
    torch.manual_seed(0)
    vec = vector("atari:space_invaders", seed=11)
    # the MLP's NumPy path acts in microseconds; the policy's weights do not matter here, only the rollout code
    worker = RolloutWorker(vec, 64, learner=LearnerConfig(model="mlp"), seed=0)
    actions, rewards, lives, terminal_lives = [], [], [], None
    try:
        ale = vec.envs[0].unwrapped.ale
        start_lives = ale.lives()
        for _ in range(200):  # at most 12,800 agent steps; a random Space Invaders game is far shorter
            unroll = worker.unroll()
            validate_unroll(unroll, vec.spec)
            assert unroll["obs"].dtype == np.uint8  # frames travel as bytes
            ended = np.flatnonzero(unroll["terminated"][:, 0] | unroll["truncated"][:, 0])
            stop = int(ended[0]) + 1 if len(ended) else len(unroll["actions"])
            actions += unroll["actions"][:stop, 0].tolist()
            rewards += unroll["rewards"][:stop, 0].tolist()
            lives.append(ale.lives())
            if len(ended):
                assert unroll["terminated"][ended[0], 0]  # game over, not a time limit
                terminal_lives = 0
                reported = unroll["episode_returns"][0]
                seed = int(unroll["episode_seeds"][0])
                break
        assert terminal_lives == 0, "the episode did not end"
    finally:
        vec.close()
    assert set(rewards) <= {-1.0, 0.0, 1.0}  # the learner's reward: clipped
    # replay on an unclipped env: the same seed and actions play the same game
    replay = atari_env.make("atari:space_invaders")
    try:
        replay.reset(seed=seed)
        raw, done = [], False
        for i, a in enumerate(actions):
            _, r, term, trunc, _ = replay.step(a)
            raw.append(r)
            done = term or trunc
            assert done == (i == len(actions) - 1)
        assert done
    finally:
        replay.close()
    assert np.array_equal(np.sign(raw), rewards)
    assert reported == pytest.approx(sum(raw))  # the reported return is the game's score ...
    assert sum(raw) > sum(rewards) > 0, (sum(raw), sum(rewards), len(raw))  # ... not the clipped sum
    assert start_lives == 3 and min(lives) < start_lives  # lives were lost and the episode went on


def test_max_episode_steps_counts_agent_steps():
    vec = vector("atari:breakout", max_episode_steps=5)
    try:
        vec.reset()
        base = vec.envs[0].unwrapped
        for t in range(5):
            step = vec.step(np.array([FIRE]))
            assert bool(step.truncated[0]) == (t == 4) and not step.terminated[0]
        assert set(step.final_obs) == {0} and step.final_obs[0].shape == (84, 84, 4)
        assert base.ale.getEpisodeFrameNumber() <= 30 + 4  # a new episode: at most its no-ops and one step
    finally:
        vec.close()


def test_periodic_evaluation_reports_the_human_normalized_score():
    cfg = replace_paths(RunConfig(), {
        "env.id": "atari:pong", "env.num_levels": 0, "env.max_episode_steps": 10,
        "eval.interval_updates": 1, "eval.episodes": 2, "eval.num_envs": 2,
    })
    vec = vector("atari:pong")
    weights = weights_to_numpy(build_model(vec.spec))
    vec.close()
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # as on an actor; two threads on two busy cores crawl
    try:
        ev = PeriodicEvaluator(cfg, use_ray=False)
        ev.maybe_start(1, weights)
        res = ev.poll()
    finally:
        torch.set_num_threads(before)
    assert res["test_episodes"] == 2
    assert res["test_human_normalized_score"] == pytest.approx((res["test_return_mean"] + 20.7) / (14.6 + 20.7))


def test_human_normalized_score_formula_and_references():
    assert human_normalized_score("breakout", 1.7) == 0.0
    assert human_normalized_score("breakout", 30.5) == pytest.approx(1.0)
    assert human_normalized_score("breakout", 16.1) == pytest.approx(0.5)  # (16.1 - 1.7) / 28.8
    assert human_normalized_score("pong", 0.0) == pytest.approx(20.7 / 35.3)
    assert human_normalized_score("pong", -21.0) == pytest.approx(-0.3 / 35.3)  # below random: negative
    assert human_normalized_score("montezuma_revenge", 2500.0) == pytest.approx(2500.0 / 4753.3)
    # no reference: None, not an error
    assert human_normalized_score("adventure", 10.0) is None  # an ALE game outside Atari-57
    assert human_normalized_score("not_a_game", 10.0) is None
    assert human_normalized_score("breakout", math.nan) is None
    # the 57 games, each under the name `atari:<game>` uses, with human above random
    assert len(REFERENCE_SCORES) == 57 and set(REFERENCE_SCORES) <= set(atari_env.games())
    assert all(human > random for random, human in REFERENCE_SCORES.values())


TINY = ["--num-actors", "1", "--envs-per-actor", "2", "--unroll-length", "8", "--batch-size", "1",
        "--metrics-port", "0", "--quiet", "--tensorboard", "false"]


def train_and_evaluate(run, backend: str, capsys) -> tuple[list[dict], dict]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        interval = "0" if backend == "inline" else "0.2"  # Ray polls at most every 0.1 s
        assert main(["train", *TINY, "--backend", backend, "--report-interval", interval, "--env", "atari:breakout",
                     "--total-steps", "48", "--max-episode-steps", "30",  # short games: a quick evaluation
                     "--run-dir", str(run)]) == 0
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        capsys.readouterr()
        assert main(["evaluate", str(run), "--levels", "test", "--episodes", "2", "--num-envs", "2", "--json"]) == 0
    finally:
        torch.set_num_threads(before)
    return records, json_output(capsys.readouterr().out)


def check_run(run, records: list[dict], out: dict) -> None:
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["preset"] == "atari" and config["env"]["num_levels"] == 0
    assert config["learner"]["model"] == "impala_cnn"
    last = records[-1]
    assert 48 <= last["env_steps"] < 48 + 16 and last["learner_version"] >= 3  # whole unrolls of 8 x 2
    ckpt = RunDir(run).load_latest_checkpoint()
    assert ckpt["counters"]["env_steps"] == last["env_steps"] and ckpt["version"] == last["learner_version"]
    assert out["env"] == "atari:breakout" and out["atari_game"] == "breakout" and out["held_out"] is False
    test = out["results"]["test"]
    assert test["episodes"] == 2 and all(r >= 0 and float(r).is_integer() for r in test["returns"])
    assert test["length_mean"] == 30  # the run's --max-episode-steps (agent steps) holds in evaluation too
    assert test["human_normalized_score"] == pytest.approx((test["return_mean"] - 1.7) / (30.5 - 1.7))


@pytest.mark.timeout(120)
def test_train_and_evaluate_through_the_cli_inline(tmp_path, capsys):
    run = tmp_path / "breakout"
    records, out = train_and_evaluate(run, "inline", capsys)
    check_run(run, records, out)


@pytest.mark.timeout(180)
def test_train_and_evaluate_through_the_cli_on_ray(ray_session, tmp_path, capsys):
    run = tmp_path / "breakout-ray"
    records, out = train_and_evaluate(run, "ray", capsys)
    check_run(run, records, out)

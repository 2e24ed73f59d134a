"""A curriculum (`tests/least_played.py`) and a level score (`tests/score_plugin.py`) of one's own, named by
`module:attribute` (`--level-source`, `--level-strategy`): each does what it says, trains on both backends with no edit
of the package, is shown word for word in docs/guides/writing-a-curriculum.md; a saved state names the curriculum
that wrote it and is refused by another; a name that does not load is refused before the run starts, naming the
flag, the kind and what exists."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from levelray.contracts.config import ConfigError, LevelConfig, from_dict
from levelray.contracts.levels import STRATEGIES, UNSCORED_STRATEGIES
from levelray.contracts.snapshot import packb, unpackb
from levelray.deploy.cli import main
from levelray.level_service.sampler import LevelSampler
from levelray.level_service.service import LevelServiceCore
from levelray.level_service.spaces import CURRICULA, PLR, check_curriculum, make_sampler
from levelray.policy.level_scores import LEVEL_SCORES, Episode, episode_score, load_level_score
from tests import score_plugin
from tests.least_played import LeastPlayed
from tests.score_plugin import return_error
from tests.support import episode_results

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "guides" / "writing-a-curriculum.md"
LEAST = "tests.least_played:LeastPlayed"
RETURNS = "tests.score_plugin:return_error"
CORRIDOR = ["--env", "corridor:walk", "--env-family", "tests.corridor:FAMILY", "--num-levels", "20",
            "--num-actors", "1", "--envs-per-actor", "8", "--unroll-length", "16", "--metrics-port", "0",
            "--report-interval", "1", "--quiet", "--tensorboard", "false"]


def test_the_guide_shows_both_examples_and_how_to_name_them():
    text = GUIDE.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert (ROOT / "tests" / "least_played.py").read_text() in blocks
    assert (ROOT / "tests" / "score_plugin.py").read_text() in blocks
    assert f"--level-source {LEAST}" in text and f"--level-strategy {RETURNS}" in text


def test_the_built_ins_are_registered_under_their_names():
    assert CURRICULA.names() == ["plr", "sfl"] and CURRICULA.load("plr") is PLR
    assert LEVEL_SCORES.names() == sorted(set(STRATEGIES) - set(UNSCORED_STRATEGIES))
    assert CURRICULA.load(LEAST) is LeastPlayed and load_level_score(RETURNS) is return_error


# ----------------------------------------------------------------------------- what each does


def test_least_played_replays_the_least_played_levels_and_evens_the_counts_out():
    source = make_sampler(range(100, 110), LevelConfig(source=LEAST), rng=0)
    assert type(source) is LeastPlayed
    source.update_with_episodes(episode_results([100, 101, 101, 102, 102, 102], [9.0, 0.0, 5.0, 1.0, 1.0, 1.0]))
    assert source.scores()[:3].tolist() == [-1.0, -2.0, -3.0]  # minus the plays; the episodes' scores unused
    weights = source.sample_weights()
    assert weights[0] > weights[1] > weights[2] > 0.0  # the least-played seen level weighs most
    spread = {}
    for curriculum in (LEAST, "plr"):  # 500 episodes, each on the level drawn, reported with a random score
        source = make_sampler(range(100, 110), LevelConfig(source=curriculum), rng=0)
        plays, rng = np.zeros(10, dtype=np.int64), np.random.default_rng(1)
        for _ in range(500):
            ids, _replayed = source.draw_many(1)
            plays[ids[0] - 100] += 1
            source.update_with_episodes(episode_results(ids, rng.random(1)))
        if curriculum == LEAST:
            assert np.array_equal(-source.scores(), plays)
        spread[curriculum] = int(plays.max() - plays.min())
    assert spread[LEAST] <= 3 < 20 < spread["plr"], spread


def test_return_error_is_value_l1_at_lambda_one():
    rng = np.random.default_rng(0)
    for length in (1, 2, 17):
        rewards, values = rng.normal(size=length), rng.normal(size=length).astype(np.float32)
        episode = Episode(rewards, values, None, False, 0.9, 1.0)
        assert return_error(episode) == pytest.approx(LEVEL_SCORES.load("value_l1")(episode))
        assert return_error(episode) == pytest.approx(episode_score("value_l1", rewards=rewards, values=values,
                                                                    discount=0.9, gae_lambda=1.0))
    # one step, reward 1, V 0.25: G = 1, |1 - 0.25|; two steps: G = (1 + 0.9 * 2, 2) against V (0, 0)
    assert return_error(Episode(np.array([1.0]), np.array([0.25]), None, True, 0.9, 0.95)) == 0.75
    assert return_error(Episode(np.array([1.0, 2.0]), np.zeros(2), None, True, 0.9, 0.95)) == pytest.approx(2.4)


# ----------------------------------------------------------------------------- saved and resumed


def test_a_state_names_its_curriculum_resumes_with_it_and_is_refused_by_another(tmp_path):
    path = str(tmp_path / "levels.msgpack")
    least = LevelConfig(source=LEAST)
    core = LevelServiceCore(range(10), least, rng=0, snapshot_path=path)
    ids, _, _ = core.draw_levels(6)
    core.report_episodes(episode_results(ids, np.ones(6)))
    core.snapshot()
    state = unpackb(packb(core.state_dict()))
    assert state["config"]["source"] == LEAST
    resumed = LevelServiceCore(range(10), least, snapshot_path=path)
    assert type(resumed._sampler) is LeastPlayed
    assert packb(resumed.state_dict()) == packb(core.state_dict())
    assert resumed.draw_levels(16) == core.draw_levels(16)
    plr = LevelServiceCore(range(10), LevelConfig(), rng=0)
    assert "curriculum" not in plr.state_dict()["config"]  # a PLR state is the one written before curricula
    before = packb(plr.state_dict())
    with pytest.raises(ValueError, match=f"state was written by curriculum {LEAST}, this run has plr "
                                         r"\(levels.source, --level-source\)"):
        plr.load_state_dict(state)
    assert packb(plr.state_dict()) == before
    with pytest.raises(ValueError, match=f"written by curriculum plr, this run has {LEAST}"):
        core.load_state_dict(unpackb(before))
    with pytest.raises(ValueError, match=f"snapshot {path} was written by curriculum {LEAST}"):
        LevelServiceCore(range(10), LevelConfig(), snapshot_path=path)
    with pytest.raises(ValueError, match=f"levels.source {LEAST} runs over a fixed level set"):
        LevelServiceCore(None, least, rng=0)


# ----------------------------------------------------------------------------- bad names


def test_a_curriculum_or_score_that_does_not_load_is_refused_naming_the_flag_the_kind_and_what_exists():
    for key, name in (("source", "Least Played"), ("strategy", "best")):
        with pytest.raises(ConfigError, match=f"levels.{key}"):
            from_dict({"levels": {key: name}})
    with pytest.raises(ConfigError, match=r"levels.strategy: expected one of random, sequential, .*positive_value_loss "
                                          r"\(--level-strategy: unscored, or a built-in level score\), or "
                                          r"module:attribute"):
        from_dict({"levels": {"strategy": "best"}})
    for levels, words in (
        ({"source": "least"}, r"--level-source 'least' \(levels.source\): no level source is called that; built "
                                  r"in: plr, sfl; or name one of your own as module:attribute"),
        ({"source": "tests.least_played:Most"}, r"levels.source.*has no level source 'Most'"),
        ({"source": "tests.no_such_module:X"}, r"levels.source.*cannot import 'tests.no_such_module'"),
        ({"source": RETURNS}, r"--level-source .* has no for_run or from_state_dict"),
        ({"strategy": "tests.score_plugin:nothing"}, r"--level-strategy tests.score_plugin:nothing "
                                                     r"\(levels.strategy\): 'tests.score_plugin' has no level score "
                                                     r"function 'nothing'"),
        ({"strategy": "tests.score_plugin:__doc__"}, r"levels.strategy.*a level score is a function of an Episode"),
    ):
        with pytest.raises(ConfigError, match=words):
            check_curriculum(from_dict({"levels": levels}).levels)
    for name in ("random", "sequential", "value_l1", RETURNS):  # what loads passes
        check_curriculum(LevelConfig(strategy=name))


def test_a_score_that_is_not_a_finite_number_is_refused_naming_it(monkeypatch):
    from levelray.actors.episode_scorer import EpisodeScorer

    monkeypatch.setattr(score_plugin, "return_error", lambda episode: float("nan"))
    scorer = EpisodeScorer(RETURNS, 1, discount=0.9, gae_lambda=0.95)
    unroll = {"rewards": np.ones((2, 1), np.float32), "terminated": np.array([[False], [True]]),
              "truncated": np.zeros((2, 1), bool), "level_seeds": np.full((2, 1), 3), "behaviour_params": None,
              "episode_success": np.zeros((2, 1), bool), "episode_return": np.full((2, 1), 2.0)}
    with pytest.raises(ValueError, match=f"level score {RETURNS} \\(levels.strategy\\) gave nan for an episode of "
                                         "level 3"):
        scorer.add(unroll, np.zeros((2, 1), np.float32))


def test_bad_names_are_refused_before_the_run_directory_is_claimed(tmp_path, capsys):
    for flags, words in (
        (["--level-source", "least"], "--level-source 'least' (levels.source): no level source is called that; built "
                                    "in: plr"),
        (["--level-strategy", "tests.score_plugin:nothing"], "'tests.score_plugin' has no level score function "
                                                             "'nothing'"),
    ):
        run = tmp_path / flags[1].replace(":", "_")
        with pytest.raises(SystemExit) as refused:
            main(["train", "--backend", "inline", *CORRIDOR, *flags, "--run-dir", str(run)])
        assert refused.value.code == 2
        assert words in capsys.readouterr().err
        assert not run.exists()


# ----------------------------------------------------------------------------- training


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["inline", "ray"])
def test_both_train_on_both_backends_and_the_curriculum_resumes(backend, tmp_path, request, one_thread, monkeypatch,
                                                                capsys):
    """One run names both: the actors score with `return_error` (counted where they run in this process), the level
    service replays by `LeastPlayed`, whose saved scores are minus each level's plays; resumed (inline), it counts
    on, and a resume that names another curriculum is refused."""
    from levelray.deploy.rundir import RunDir
    from levelray.deploy.training.driver import load_resume_state

    if backend == "ray":
        request.getfixturevalue("ray_session")
    calls = []
    monkeypatch.setattr(score_plugin, "return_error", lambda episode: calls.append(1) or return_error(episode))
    run = tmp_path / "least_played"
    flags = ["--level-source", LEAST, "--level-strategy", RETURNS, "--checkpoint-interval", "1000"]
    assert main(["train", "--backend", backend, *CORRIDOR, *flags, "--total-steps", "4000", "--run-dir",
                 str(run)]) == 0
    assert backend == "ray" or calls  # inline: the actor scored with it; on Ray it loaded in the actor's process
    first = load_resume_state(RunDir(run))["levels"]
    assert first["config"]["source"] == LEAST and first["config"]["strategy"] == RETURNS
    plays = -np.asarray(first["scores"])  # return_error's scores are >= 0: these are LeastPlayed's, whole numbers
    assert plays.sum() == first["counts"]["num_episodes"] > 0 and np.array_equal(plays, np.round(plays))
    if backend == "ray":  # resuming reads the state back by its curriculum's class the same way on both backends
        return
    assert main(["train", "--resume", str(run), "--total-steps", "8000", "--quiet"]) == 0
    second = load_resume_state(RunDir(run))["levels"]
    assert -np.asarray(second["scores"]).sum() == second["counts"]["num_episodes"] > first["counts"]["num_episodes"]
    with pytest.raises(SystemExit):  # the curriculum is part of the saved state: a resume keeps it
        main(["train", "--resume", str(run), "--level-source", "plr", "--quiet"])
    assert "--resume cannot change levels.source" in capsys.readouterr().err


def test_plr_is_todays_level_sampler_and_buffer():
    fixed = make_sampler(range(5), LevelConfig(), rng=0)
    assert type(fixed) is LevelSampler
    unbounded = make_sampler(None, LevelConfig(), start_level=7, rng=0)
    assert type(unbounded).__name__ == "LevelBuffer" and unbounded.start_level == 7

"""Level windows (`level_service.windows`, `actors.level_windows`): replay or explore decided for a window of env steps,
as DCD decides it per rollout. The service's decisions and draws, and its refusals; each env family's restart at a
window start; a worker's windows (all replayed or all explored, cut episodes neither scored nor counted); the tally of
kept unrolls and its refusals; and whole runs on both backends, whose trained share is p (Robust PLR) and p/(1+p)
(ACCEL), with only replay windows' unrolls reaching the learner."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from levelray.actors.env_vector import LevelDraws
from levelray.actors.envs import make_env_vector
from levelray.actors.episode_scorer import EpisodeScorer
from levelray.actors.level_windows import ExploreTally, LevelWindows, ServiceWindows, window_unrolls
from levelray.actors.rollout import RolloutWorker
from levelray.contracts.config import EnvConfig, LevelConfig, RunConfig, replace_paths
from levelray.contracts.levels import EpisodeResults
from levelray.contracts.snapshot import packb
from levelray.contracts.trajectory import TrajectoryError, validate_unroll
from levelray.level_service.service import LevelServiceCore

MAZE = EnvConfig(id="maze:7x7", num_levels=0, maze_blocks="0-10", max_episode_steps=12)
ROBUST = LevelConfig(strategy="value_l1", buffer_size=8, rho=0.25, replay_prob=0.5, robust=True, window=8)
ACCEL = dataclasses.replace(ROBUST, replay_prob=0.8, editor="accel", num_edits=3)


def _scored(core: LevelServiceCore, levels: list[int]) -> None:
    """Score an episode of each level (they enter the buffer while it has room)."""
    n = len(levels)
    core.report_episodes(EpisodeResults(levels=np.array(levels, dtype=np.int64), scores=np.arange(1.0, n + 1),
                                         lengths=np.full(n, 5), returns=np.zeros(n), solved=np.zeros(n, dtype=bool)))


def _filled(config: LevelConfig, rng: int = 0) -> LevelServiceCore:
    core = LevelServiceCore(None, config, env=MAZE, rng=rng)
    _scored(core, core.draw_levels(4, "new")[0])
    return core


# ---------------------------------------------------------------- the service


def test_windows_explore_until_replay_can_start_then_replay_with_p():
    core = LevelServiceCore(None, ROBUST, env=MAZE, rng=1)
    first = core.draw_window(3, 5)
    assert not first.replay and len(first.levels) == 3  # nothing buffered: an explore window, one level per env
    _scored(core, first.levels + core.draw_levels(1, "new")[0])  # 4 of 8 buffered: rho reached
    windows = [core.draw_window(3, 5) for _ in range(2000)]
    replays = [w for w in windows if w.replay]
    assert abs(len(replays) / len(windows) - 0.5) < 0.04
    buffered = set(core.state_dict()["seeds"][:4].tolist())
    assert all(len(w.levels) == 8 and set(w.levels) <= buffered for w in replays)  # 3 to start, 5 more
    assert all(len(w.levels) == 3 and not set(w.levels) & buffered for w in windows if not w.replay)
    stats = core.stats()
    assert stats["num_windows"] == 2001 and stats["num_replay_windows"] == len(replays)


def test_a_replay_window_makes_one_child_per_env_and_the_next_window_explores_them():
    core = _filled(ACCEL)
    window = next(w for w in iter(lambda: core.draw_window(3, 2), None) if w.replay)
    queued = core.stats()["editor"]["queued"]
    assert queued == 3 and core.stats()["levels_edited"] == 3
    children = core.draw_window(3, 2)
    assert not children.replay and len(children.levels) == 3 and set(children.encodings) == set(children.levels)
    assert core.stats()["editor"]["queued"] == 0
    # scoring a replay makes no child in window mode (children come with replay windows only)
    _scored(core, window.levels[:1])
    assert core.stats()["levels_edited"] == 3


@pytest.mark.parametrize("bad, field", [
    ((0, 0), "num_envs"), ((True, 0), "num_envs"), ((2, -1), "extra"), ((2, 1.5), "extra"), ((2, 1 << 17), "extra"),
])
def test_bad_window_requests_are_refused_naming_the_field_and_change_nothing(bad, field):
    core = _filled(ACCEL)
    before = packb(core.state_dict()), core.stats()["num_windows"]
    with pytest.raises(ValueError, match=field):
        core.draw_window(*bad)
    assert (packb(core.state_dict()), core.stats()["num_windows"]) == before


def test_a_service_without_windows_refuses_window_requests():
    for core in (LevelServiceCore(None, dataclasses.replace(ROBUST, window=0), env=MAZE),
                 LevelServiceCore(range(10), ROBUST)):
        with pytest.raises(ValueError, match="levels.window"):
            core.draw_window(2, 0)


def test_the_window_decisions_resume_from_a_snapshot(tmp_path):
    path = tmp_path / "levels.msgpack"
    core = LevelServiceCore(None, ROBUST, env=MAZE, rng=3, snapshot_path=str(path))
    _scored(core, core.draw_levels(4, "new")[0])
    core.draw_window(2, 2)
    core.snapshot()
    restored = LevelServiceCore(None, ROBUST, env=MAZE, rng=99, snapshot_path=str(path))
    assert [restored.draw_window(2, 2) for _ in range(20)] == [core.draw_window(2, 2) for _ in range(20)]


def test_draw_kinds_on_both_samplers():
    core = _filled(ROBUST)
    ids, replayed, _ = core.draw_levels(6, "replay")
    assert all(replayed) and set(ids) <= set(core.state_dict()["seeds"][:4].tolist())
    assert not any(core.draw_levels(6, "new")[1])
    fixed = LevelServiceCore(range(5), dataclasses.replace(ROBUST, rho=0.0))
    assert not any(fixed.draw_levels(3, "replay")[1])  # nothing seen: unseen levels, flagged new
    with pytest.raises(ValueError, match="kind"):
        fixed.draw_levels(2, "old")


# ---------------------------------------------------------------- env families


class Levels(LevelDraws):
    """Hands out `levels` in order, then the last again."""

    def __init__(self, num_envs: int, levels: list[int]):
        super().__init__(num_envs)
        self.levels = list(levels)

    def next_level(self):
        return (self.levels.pop(0) if len(self.levels) > 1 else self.levels[0]), False


FAMILIES = [EnvConfig(id="maze:7x7", maze_blocks="5-10"), EnvConfig(id="minigrid:DoorKey-5x5"),
            EnvConfig(id="CartPole-v1"), EnvConfig(id="CartPole-v1", native_vector=False),
            EnvConfig(id="procgen:coinrun"), EnvConfig(id="atari:pong")]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("cfg", FAMILIES, ids=lambda c: f"{c.id}{'' if c.native_vector else '-looped'}")
def test_restart_abandons_the_episode_and_starts_the_given_level(cfg):
    """`EnvVector.restart` starts the level the source gives next, mid-episode, with exactly the first observation a
    fresh vector's reset on that level gives; the other envs play on."""
    vec = make_env_vector(cfg, 2, Levels(2, [11, 12]), seed=0)
    fresh = make_env_vector(cfg, 1, Levels(1, [23]), seed=0)
    try:
        vec.reset()
        for _ in range(3):
            step = vec.step(np.zeros(2, dtype=np.int64))
        other = vec.current_levels()[0]
        vec._choose.source.levels = [23]
        first = vec.restart(np.array([1]))
        assert first.shape == (1, *vec.spec.obs_shape) and first.dtype == step.obs.dtype
        np.testing.assert_array_equal(first[0], fresh.reset()[0])
        assert vec.current_levels().tolist() == [other, 23]
        assert vec.restart(np.array([], dtype=np.int64)).shape == (0, *vec.spec.obs_shape)
    finally:
        vec.close()
        fresh.close()


def test_a_window_end_truncates_the_running_episodes_with_their_true_final_observations():
    """What `LevelWindows.close` does to a step: the envs whose episode did not end are truncated, their final
    observation is the step's own, and their next observation is their new level's first."""
    core = _filled(ROBUST)
    windows = LevelWindows(ServiceWindows(core, 3), 3, 1, withhold=True)
    windows.begin()
    vec = make_env_vector(MAZE, 3, windows.levels, seed=0)
    vec.reset()
    windows.open_next()
    step = vec.step(np.full(3, 2))
    after_step, ended = step.obs.copy(), step.terminated | step.truncated
    cut = windows.close(vec, step)
    assert cut.tolist() == (~ended).tolist() and step.truncated[cut].all()
    for k in np.flatnonzero(cut).tolist():
        np.testing.assert_array_equal(step.final_obs[k], after_step[k])
        level = vec.current_levels()[k]
        np.testing.assert_array_equal(step.obs[k], make_env_vector(MAZE, 1, Levels(1, [level])).reset()[0])
    assert vec.current_levels().tolist() == windows.levels.start


# ---------------------------------------------------------------- a worker's windows


def _worker(config: LevelConfig, window_unrolls: int, unroll_length: int = 5, num_envs: int = 3):
    cfg = replace_paths(RunConfig(), {"env.id": MAZE.id, "env.num_levels": 0, "env.maze_blocks": MAZE.maze_blocks,
                                      "env.max_episode_steps": MAZE.max_episode_steps, "levels.strategy": "value_l1",
                                      "actors.envs_per_actor": num_envs, "actors.unroll_length": unroll_length})
    core = _filled(config)
    windows = LevelWindows(ServiceWindows(core, num_envs), num_envs, window_unrolls, withhold=config.robust)
    envs = make_env_vector(cfg.env, num_envs, windows.levels, seed=0)
    scorer = EpisodeScorer.for_run(cfg)
    worker = RolloutWorker(envs, unroll_length, level_draws=windows.levels, scorer=scorer, windows=windows)
    return worker, core, scorer


@pytest.mark.timeout(120)
def test_a_windows_steps_are_all_replayed_or_all_explored_and_cut_episodes_are_not_scored():
    worker, core, scorer = _worker(ROBUST, window_unrolls=2)
    kinds, scored, finished, cut = [], 0, 0, 0
    for i in range(60):
        replay = worker.windows.replay
        closing = worker.windows.closing
        unroll = worker.unroll()
        validate_unroll(unroll, worker.spec)
        assert unroll["level_replayed"].all() if replay else not unroll["level_replayed"].any()
        assert worker.withheld == (not replay)  # Robust PLR keeps the explore windows' unrolls
        assert closing == (i % 2 == 1)
        dones = unroll["terminated"] | unroll["truncated"]
        if closing:  # every env ends its episode at the window's last step, by itself or cut
            assert dones[-1].all()
        results = scorer.take()
        scored += 0 if results is None else len(results)
        finished += len(unroll["episode_returns"])
        cut += int(dones.sum()) - len(unroll["episode_returns"])
        assert unroll["episode_replayed"].tolist() == [replay] * len(unroll["episode_returns"])
        kinds.append(replay)
    assert scored == finished and cut > 0  # a cut episode is neither scored nor counted
    assert 5 < sum(kinds) < 55
    assert kinds[::2] == kinds[1::2]  # the two unrolls of a window are of one kind


@pytest.mark.timeout(120)
def test_an_explore_window_restarts_each_env_on_its_one_level():
    worker, _, _ = _worker(dataclasses.replace(ROBUST, replay_prob=0.0), window_unrolls=4)
    for _ in range(3):  # the first window
        unroll = worker.unroll()
        assert (unroll["level_seeds"] == unroll["level_seeds"][:1]).all()
        assert not unroll["level_replayed"].any()


def test_the_tally_counts_kept_unrolls_and_bad_tallies_are_refused_naming_the_field(tmp_path):
    from levelray.learner.core import LearnerCore
    from tests.support import cartpole_config

    cfg = cartpole_config(tmp_path, learner__batch_size=1)
    core = LearnerCore(cfg, make_env_vector(cfg.env, 1).spec)
    tally = ExploreTally()
    assert tally.take() is None
    tally.add({"rewards": np.zeros((4, 2)), "episode_returns": np.array([1.0, 2.0]),
               "episode_lengths": np.array([3, 4])})
    good = tally.take()
    core.accept_tally(good)
    stats = core.stats()
    assert (stats["env_steps"], stats["episodes"], stats["learner_samples_received"]) == (8, 2, 0)
    assert stats["episode_return_mean"] == 1.5 and tally.take() is None
    for bad, field in (({**good, "env_steps": -1}, "env_steps"), ({**good, "env_steps": 2.0}, "env_steps"),
                       ({**good, "episode_returns": np.array([np.nan, 1.0])}, "episode_returns"),
                       ({**good, "episode_returns": np.zeros((2, 1))}, "episode_returns"),
                       ({**good, "episode_lengths": np.array([3])}, "episode_lengths"),
                       ({**good, "episode_lengths": np.array([0, 4])}, "episode_lengths"), ([], "tally")):
        with pytest.raises(TrajectoryError, match=field):
            core.accept_tally(bad)
    assert core.stats()["env_steps"] == 8 and core.stats()["episodes"] == 2


def test_window_unrolls_round_up_and_apply_to_a_level_buffer_only():
    cfg = replace_paths(RunConfig(), {"env.id": "maze:7x7", "env.num_levels": 0, "levels.strategy": "value_l1",
                                      "actors.unroll_length": 20, "levels.window": 50})
    assert window_unrolls(cfg) == 3
    assert window_unrolls(dataclasses.replace(cfg, levels=dataclasses.replace(cfg.levels, window=0))) == 0
    assert window_unrolls(dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, num_levels=10))) == 0


# ---------------------------------------------------------------- whole runs


def _run_args(backend: str, run_dir, accel: bool) -> list[str]:
    """Windows of one 8-step unroll of 4 envs: ~1,500 windows in 48k steps, so the replay share's standard error is
    about 0.013; a 16-level buffer that replays from its 4th level."""
    return ["train", "--backend", backend, "--env", "maze:7x7", "--maze-blocks", "0-10", "--num-levels", "0",
            "--level-robust", "--level-strategy", "positive_value_loss", "--level-buffer-size", "16",
            "--level-rho", "0.25", "--level-replay-prob", "0.8" if accel else "0.5", "--level-window", "8",
            *(["--level-editor", "accel", "--level-num-edits", "3"] if accel else []),
            "--num-actors", "1", "--envs-per-actor", "4", "--unroll-length", "8", "--batch-size", "2",
            "--max-episode-steps", "20", "--total-steps", "48000", "--metrics-port", "0", "--report-interval", "0.5",
            "--quiet", "--tensorboard", "false", "--run-dir", str(run_dir)]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["inline", "ray"])
@pytest.mark.parametrize("accel", [False, True], ids=["robust_plr", "accel"])
def test_the_trained_share_is_p_or_p_over_1_plus_p(backend, accel, tmp_path, one_thread, request):
    from levelray.deploy.cli import main

    if backend == "ray":
        request.getfixturevalue("ray_session")
    run = tmp_path / backend
    assert main(_run_args(backend, run, accel)) == 0
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    start = next(r for r in records if r["levels_buffered"] >= 4)  # replay can start from here
    end = records[-1]
    share = (end["samples_trained"] - start["samples_trained"]) / (end["env_steps"] - start["env_steps"])
    expected = 0.8 / 1.8 if accel else 0.5
    assert abs(share - expected) < 0.05, (share, expected)
    # only replay windows' unrolls reach the learner, and each of them is trained on whole
    received, trained = end["learner_samples_received"], end["samples_trained"]
    if backend == "inline":
        assert received == trained
    else:  # a batch still being gathered when the run stopped: received, not yet trained
        assert 0 <= received - trained <= 2 * 8 * 4
    fractions = [r["levels_trained_fraction"] for r in records if r["levels_trained_fraction"] is not None]
    assert fractions and all(0.0 <= f <= 1.0 for f in fractions)  # a share, whenever the learner trains
    if accel:
        assert end["levels_edited"] > 0


@pytest.mark.timeout(120)
def test_an_inline_batch_begun_is_trained_even_when_every_report_is_due(tmp_path, one_thread):
    """Under Robust PLR the inline backend returns to report while an explore window runs, holding the unrolls of a
    batch begun; when the explore steps then spend the budget, that batch is still trained: every unroll that
    reached the learner is trained on, whatever the wall clock did (a report always due here)."""
    import threading

    from levelray.contracts.counters import budget_reached
    from levelray.deploy.cli import build_config, build_parser
    from levelray.deploy.training.inline import InlineBackend

    parser, dests = build_parser()
    args = _run_args("inline", tmp_path, accel=False)
    cfg = build_config(parser.parse_args([*args[:args.index("--total-steps")], "--total-steps", "6000"]), dests)
    backend = InlineBackend(cfg)
    for _ in range(10_000):
        stats = backend.core.stats()
        if budget_reached(cfg, stats["env_steps"], stats["samples_trained"]):
            break
        backend.advance(until_time=0.0, until_version=10**9, stop=threading.Event())
    stats = backend.core.stats()
    assert budget_reached(cfg, stats["env_steps"], stats["samples_trained"])
    assert stats["learner_samples_received"] == stats["samples_trained"] > 0
    backend.close()


@pytest.mark.timeout(120)
def test_an_actor_killed_mid_window_loses_that_windows_results_only(ray_session):
    """An env actor on Ray sends a window's episode results when the window ends: killed two unrolls into its fourth
    window, the level service holds every episode of the three windows before, and none of the fourth's."""
    from levelray.actors.env_actor import EnvActor
    from levelray.deploy.training.components import level_service_args
    from levelray.level_service.service import LevelService
    from tests.support import wait_for

    cfg = replace_paths(RunConfig(), {"actors.envs_per_actor": 4, "actors.unroll_length": 4})
    cfg = dataclasses.replace(cfg, env=dataclasses.replace(MAZE, max_episode_steps=5),
                              levels=dataclasses.replace(ROBUST, robust=False, window=12))
    assert window_unrolls(cfg) == 3
    service = LevelService.remote(**level_service_args(cfg))
    actor = ray_session.remote(num_cpus=0)(EnvActor).remote(0, cfg, None, service, seed=3)
    try:
        unrolls = ray_session.get(actor.collect.remote(3 * 3 + 2), timeout=60)
    finally:
        ray_session.kill(actor)
    finished = [len(u["episode_returns"]) for u in unrolls]
    in_closed_windows, in_open_window = sum(finished[:9]), sum(finished[9:])
    assert in_closed_windows > 0 and in_open_window > 0, finished

    def received() -> int:
        return ray_session.get(service.stats.remote())["num_episodes"]

    wait_for(lambda: received() == in_closed_windows, 30, "the closed windows' episodes at the service",
             detail=lambda: f"received {received()}, closed windows {in_closed_windows}, open {in_open_window}")
    assert received() == in_closed_windows
    assert len(ray_session.get(service.draw_window.remote(4, 0)).levels) == 4  # and the service still serves
    ray_session.kill(service)


def test_the_trained_fraction_reaches_the_record_and_prometheus():
    """`levels_trained_fraction`: of the env steps since the last report, those trained on (None before a second
    report, and where no env step arrived); in `metrics.jsonl`'s record and as a Prometheus gauge."""
    from levelray.deploy.monitoring.metrics import JobCollector
    from levelray.deploy.training.driver import RecentFraction, build_record

    fraction = RecentFraction()
    assert fraction.update(1000, 200) is None
    assert fraction.update(3000, 1000) == pytest.approx(0.4)
    assert fraction.update(3000, 1000) is None
    learner = {"env_steps": 3000, "episodes": 3, "episode_return_mean": 0.5, "episode_length_mean": 20.0,
               "learner_version": 2, "samples_trained": 1000, "policy_lag_mean": 0.0, "queue_depth": 0,
               "dropped": {}, "metrics": {}}
    snap = {"learner": learner, "in_process_actors": 1}
    rec = build_record(snap, steps_per_second=1.0, elapsed_s=1.0, trained_fraction=0.4)
    assert rec["levels_trained_fraction"] == 0.4
    json.dumps(rec)
    collector = JobCollector()
    collector.update({**snap, "levels_trained_fraction": 0.4})
    gauges = {f.name: f.samples[0].value for f in collector.collect() if f.samples}
    assert gauges["levelray_levels_trained_fraction"] == pytest.approx(0.4)


def test_the_record_sums_the_live_actors_level_service_errors():
    """`level_service_errors` in the record: the failed level-service calls the live env actors counted (a dead
    actor's are gone with it); 0 inline, where the service raises instead."""
    from levelray.deploy.training.driver import build_record

    learner = {"env_steps": 10, "episodes": 0, "episode_return_mean": None, "episode_length_mean": None,
               "learner_version": 0, "samples_trained": 0, "policy_lag_mean": 0.0, "queue_depth": 0,
               "dropped": {}, "metrics": {}}
    actors = [{"id": 0, "alive": True, "level_service_errors": 2}, {"id": 1, "alive": True, "level_service_errors": 3},
              {"id": 2, "alive": False, "state": "dead"}]
    snap = {"learner": learner, "supervisor": {"actors": actors, "actors_alive": 2}}
    assert build_record(snap, steps_per_second=0.0, elapsed_s=1.0)["level_service_errors"] == 5
    inline = build_record({"learner": learner, "in_process_actors": 1}, steps_per_second=0.0, elapsed_s=1.0)
    assert inline["level_service_errors"] == 0

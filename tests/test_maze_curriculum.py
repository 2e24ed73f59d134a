"""Seeing the curriculum of a maze run: the level service's mean wall count, mean shortest path and unsolvable
share of the levels it holds (`families.maze.stats`), and their way to metrics.jsonl, Prometheus and the
report. Expected values come from an independent computation here: wall counts summed with NumPy on the
decoded levels, path lengths from a breadth-first search written in this file (frontier sets grown a layer at
a time over the whole grid, not the library's queue)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from levelray.contracts.config import EnvConfig, LevelConfig
from levelray.deploy.monitoring.metrics import JobCollector
from levelray.deploy.training.driver import build_record
from levelray.families.maze.level import MazeLevel, level_for_id, parse_blocks, suite_level_id, suite_names
from levelray.families.maze.stats import LEVEL_COMPLEXITY_KEYS, MazeComplexity
from levelray.level_service.service import LevelServiceCore
from tests.support import episode_results

MAZE = EnvConfig(id="maze:13x13", num_levels=0, maze_blocks="40-90")
BLOCKS = parse_blocks(MAZE.maze_blocks)


def frontier_bfs(walls: np.ndarray, start: tuple[int, int], goal: tuple[int, int]) -> int | None:
    """Moves from `start` to `goal` ((x, y) cells) over the False cells of `walls [H, W]`, growing the reached set
    one layer at a time with array shifts; None when the goal is never reached."""
    free = ~walls
    reached = np.zeros_like(free)
    reached[start[1], start[0]] = True
    for moves in range(walls.size):
        if reached[goal[1], goal[0]]:
            return moves
        grown = reached.copy()
        grown[1:] |= reached[:-1]
        grown[:-1] |= reached[1:]
        grown[:, 1:] |= reached[:, :-1]
        grown[:, :-1] |= reached[:, 1:]
        grown &= free
        if np.array_equal(grown, reached):
            return None
        reached = grown
    return None


def expected(ids, blocks: tuple[int, int] = BLOCKS) -> dict[str, float | None]:
    """The three keys over the distinct `ids` of 13x13 levels with `blocks` walls, computed independently of
    `families.maze.stats`."""
    levels = [level_for_id(int(i), 13, 13, blocks) for i in sorted(set(ids))]
    walls = [int(np.count_nonzero(lv.walls)) for lv in levels]
    paths = [frontier_bfs(lv.walls, lv.agent, lv.goal) for lv in levels]
    solvable = [p for p in paths if p is not None]
    return {"levels_mean_walls": float(np.mean(walls)),
            "levels_mean_path_length": float(np.mean(solvable)) if solvable else None,
            "levels_unsolvable_fraction": sum(p is None for p in paths) / len(paths)}


def scored(seeds, score: float = 1.0):
    """One finished episode per seed, in that order, each with the score `score`."""
    return episode_results(seeds, np.full(len(seeds), score))


@pytest.fixture(scope="module")
def seeds_both_kinds() -> tuple[list[int], list[int]]:
    """Seeds of 40-90-block 13x13 levels: 4 with a path to the goal, 3 without (found by `frontier_bfs`)."""
    solvable, unsolvable = [], []
    for seed in range(500):
        lv = level_for_id(seed, 13, 13, BLOCKS)
        (solvable if frontier_bfs(lv.walls, lv.agent, lv.goal) is not None else unsolvable).append(seed)
        if len(solvable) >= 4 and len(unsolvable) >= 3:
            return solvable[:4], unsolvable[:3]
    raise AssertionError("no 3 unsolvable levels in 500 seeds at 40-90 blocks")


def test_hand_built_levels():
    """Three 3x3 levels drawn by hand: an open room (0 walls, 4 moves), a wall column that cuts the goal off
    (3 walls, no path) and a corridor (2 walls, 6 moves): means 5/3 walls and 5 moves, a third unsolvable."""
    levels = {1: MazeLevel.from_text(">..\n...\n..G\n"), 2: MazeLevel.from_text(">#G\n.#.\n.#.\n"),
              3: MazeLevel.from_text(">..\n##.\nG..\n")}
    complexity = MazeComplexity(3, 3, (0, 3), resolve=levels.__getitem__)
    assert complexity.summary([3, 1, 2, 1]) == pytest.approx(
        {"levels_mean_walls": 5 / 3, "levels_mean_path_length": 5.0, "levels_unsolvable_fraction": 1 / 3})
    assert complexity.summary([2]) == {"levels_mean_walls": 3.0, "levels_mean_path_length": None,
                                       "levels_unsolvable_fraction": 1.0}
    assert complexity.summary([]) == dict.fromkeys(LEVEL_COMPLEXITY_KEYS)


def test_core_means_over_the_scored_levels_of_a_fixed_set(seeds_both_kinds):
    """A fixed set: only the scored levels count; the unsolvable ones are left out of the path mean and make up
    the fraction; a suite maze (a hand-designed level of the reserved id range) counts like any other."""
    solvable, unsolvable = seeds_both_kinds
    suite = suite_level_id(suite_names()[0])
    training = sorted({*range(20), *solvable, *unsolvable})
    env = EnvConfig(id="maze:13x13", num_levels=len(training), maze_blocks=MAZE.maze_blocks)
    core = LevelServiceCore([*training, suite], LevelConfig(strategy="value_l1"), rng=0, env=env)
    assert core.stats()["levels_mean_walls"] is None  # nothing scored yet: the keys are there, None
    picked = [*solvable[:3], *unsolvable[:2], suite]
    core.report_episodes(scored(picked))
    st = core.stats()
    assert st["num_seen"] == len(picked)
    want = expected(picked)
    assert {k: st[k] for k in LEVEL_COMPLEXITY_KEYS} == pytest.approx(want)
    assert st["levels_unsolvable_fraction"] == pytest.approx(2 / 6)
    only_solvable = expected([*solvable[:3], suite])
    assert st["levels_mean_path_length"] == pytest.approx(only_solvable["levels_mean_path_length"])


def test_core_means_over_a_level_buffer_and_the_cache(seeds_both_kinds):
    """An unbounded space: the buffered levels; each is resolved and searched once while it stays buffered
    (a second stats() measures nothing), an evicted one is forgotten and the newcomer alone is measured."""
    solvable, unsolvable = seeds_both_kinds
    core = LevelServiceCore(None, LevelConfig(strategy="value_l1", buffer_size=6), rng=0, env=MAZE)
    first = [*solvable[:3], *unsolvable]
    core.report_episodes(scored(first, 1.0))
    st = core.stats()
    assert st["levels_buffered"] == 6
    assert {k: st[k] for k in LEVEL_COMPLEXITY_KEYS} == pytest.approx(expected(first))
    measured = core._level_statistics.num_measured  # the core's own tracker: what stats() has searched so far
    assert measured == 6
    assert core.stats() == st and core._level_statistics.num_measured == measured  # no recomputation
    core.report_episodes(scored([solvable[3]], 5.0))  # evicts a lowest-scored level
    buffered = core.state_dict()["seeds"][:6].tolist()
    assert solvable[3] in buffered and len(set(first) - set(buffered)) == 1
    st = core.stats()
    assert core._level_statistics.num_measured == measured + 1
    assert {k: st[k] for k in LEVEL_COMPLEXITY_KEYS} == pytest.approx(expected(buffered))


def test_tracker_counts_each_held_level_once():
    calls = []

    def resolve(level_id: int) -> MazeLevel:
        calls.append(level_id)
        return level_for_id(level_id, 13, 13, BLOCKS)

    complexity = MazeComplexity(13, 13, BLOCKS, resolve=resolve)
    complexity.summary(np.arange(10, 20))
    complexity.summary(np.arange(19, 9, -1))  # the same ids in another order
    assert sorted(calls) == list(range(10, 20))
    assert complexity.summary(np.arange(15, 25)) == pytest.approx(expected(range(15, 25)))
    assert sorted(calls) == list(range(10, 25))  # only the 5 newcomers
    complexity.summary([15])  # 16..24 leave the cache
    complexity.summary([15, 16])
    assert calls[-1] == 16 and len(calls) == 16


def test_absent_for_other_envs():
    for env in (None, EnvConfig(id="minigrid:DoorKey-6x6", num_levels=10), EnvConfig(id="CartPole-v1")):
        core = LevelServiceCore(range(10), LevelConfig(strategy="value_l1"), rng=0, env=env)
        core.report_episodes(scored([1, 2]))
        assert not set(LEVEL_COMPLEXITY_KEYS) & set(core.stats())
    assert MazeComplexity.for_env(EnvConfig(id="minigrid:DoorKey-6x6")) is None


def _snapshot(levels: dict) -> dict:
    learner = {"env_steps": 100, "episodes": 3, "episode_return_mean": 0.5, "episode_length_mean": 20.0,
               "learner_version": 2, "samples_trained": 100, "policy_lag_mean": 0.0, "queue_depth": 0,
               "dropped": {}, "metrics": {}}
    return {"learner": learner, "in_process_actors": 1, "levels": levels}


def _gauges(snap: dict) -> dict[str, float]:
    collector = JobCollector()
    collector.update(snap)
    return {f.name: f.samples[0].value for f in collector.collect()
            if f.name.startswith("levelray_levels_") and f.samples}


def test_records_and_prometheus(seeds_both_kinds):
    solvable, unsolvable = seeds_both_kinds
    maze = LevelServiceCore(None, LevelConfig(strategy="value_l1", buffer_size=8), rng=0, env=MAZE)
    maze.report_episodes(scored([*solvable, *unsolvable]))
    other = LevelServiceCore(range(10), LevelConfig(strategy="value_l1"), rng=0)
    want = expected([*solvable, *unsolvable])
    rec = build_record(_snapshot(maze.stats()), steps_per_second=1.0, elapsed_s=1.0)
    assert {k: rec[k] for k in LEVEL_COMPLEXITY_KEYS} == pytest.approx(want)
    json.dumps(rec)  # JSON scalars
    assert not set(LEVEL_COMPLEXITY_KEYS) & set(build_record(_snapshot(other.stats()), steps_per_second=1.0,
                                                             elapsed_s=1.0))
    gauges = _gauges(_snapshot(maze.stats()))
    for key in LEVEL_COMPLEXITY_KEYS:
        assert gauges[f"levelray_{key}"] == pytest.approx(want[key])
    gauges = _gauges(_snapshot(other.stats()))  # the maze family's gauges come with its statistics only
    assert not {f"levelray_{key}" for key in LEVEL_COMPLEXITY_KEYS} & set(gauges)


@pytest.mark.timeout(120)
def test_inline_maze_run_records_and_report(tmp_path, capsys, one_thread):
    """A short level-buffer run on mazes: every record after the first scores carries the three keys,
    walls within --maze-blocks, and the last record's numbers are those of the buffer its final checkpoint
    holds; `levelray report` draws the complexity figure (and skips it for a run without them)."""
    from levelray.deploy.cli import main
    from levelray.deploy.rundir import RunDir
    from levelray.deploy.training.driver import load_resume_state

    run = tmp_path / "maze"
    assert main(["train", "--backend", "inline", "--env", "maze:13x13", "--maze-blocks", "10-40", "--num-levels", "0",
                 "--level-strategy", "value_l1", "--level-buffer-size", "64", "--total-steps", "4000",
                 "--num-actors", "1", "--envs-per-actor", "4", "--unroll-length", "20", "--batch-size", "2",
                 "--max-episode-steps", "40", "--metrics-port", "0", "--report-interval", "0", "--quiet",
                 "--tensorboard", "false", "--run-dir", str(run)]) == 0
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    with_levels = [r for r in records if r["levels_buffered"] > 0]
    assert with_levels and all(set(LEVEL_COMPLEXITY_KEYS) <= set(r) for r in records)
    for r in with_levels:
        assert 10 <= r["levels_mean_walls"] <= 40
        assert 1 <= r["levels_mean_path_length"] <= 13 * 13
        assert 0 <= r["levels_unsolvable_fraction"] <= 1
    last, state = records[-1], load_resume_state(RunDir(run))["levels"]
    buffered = state["seeds"][: state["size"]].tolist()
    assert last["levels_buffered"] == len(buffered) > 8
    assert {k: last[k] for k in LEVEL_COMPLEXITY_KEYS} == pytest.approx(expected(buffered, (10, 40)))

    assert main(["report", str(run), "--out", str(tmp_path / "report"), "--json"]) == 0
    fig = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["curriculum_complexity"]
    assert fig["path"] == str(tmp_path / "report" / "curriculum_complexity.png")
    label = "maze (value_l1, level buffer)"
    assert fig["series"] == [f"{label} {key}" for key in LEVEL_COMPLEXITY_KEYS]
    with open(fig["path"], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"

    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.yaml").write_text("env: {id: CartPole-v1, num_levels: 0}\nlevels: {strategy: value_l1}\n")
    (plain / "metrics.jsonl").write_text(json.dumps({"env_steps": 10, "levels_buffered": 3}) + "\n")
    from levelray.deploy.report.command import make_report

    skipped = make_report([plain], tmp_path / "plain_report")["curriculum_complexity"]
    assert skipped["path"] is None and "levels_mean_walls" in skipped["skipped"]

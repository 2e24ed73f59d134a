"""What ACCEL's editor costs the level service: a child, and a service round with the editor on and off.

    python -m benchmarks.bench_editor [--buffer-size 1000] [--rounds 2000] [--json PATH]

The editor adds work in the level service only (an env plays an edited level exactly as a generated one):
per scored replay, one child (`edit_maze`, then BFS to find an unreachable goal, then its encoding), and per
draw the encodings of the edited levels handed out. Measured in one process, no Ray:

- `child_us`: `MazeEditor.make_child` on 13x13 levels (a generated parent with 0-60 walls), median per call;
- `round_us`: one service round as actors make it, on a full buffer: `draw_levels(16)` and `report_episodes` of
  the 16 episodes played on them (80 steps each, `positive_value_loss`, scored on the actors), with `levels.editor`
  `accel` and `none` (the same Robust PLR settings otherwise), alternated in blocks so that both see the same
  machine load; and that cost per env step of the round (16 x 80 steps).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from benchmarks.common import ROOT, print_table, write_json
from levelray.contracts.config import EnvConfig, LevelConfig
from levelray.contracts.levels import EpisodeResults
from levelray.families.maze.editor import MazeEditor
from levelray.level_service.service import LevelServiceCore

ENV = EnvConfig(id="maze:13x13", num_levels=0, maze_blocks="0-60")
COLUMNS, STEPS = 16, 80


def child_us(reps: int) -> float:
    editor = MazeEditor(13, 13, (0, 60), 5, queue_limit=reps + 1)
    rng = np.random.default_rng(0)
    times = []
    for seed in range(reps):
        start = time.perf_counter()
        editor.make_child(seed, rng)
        times.append(time.perf_counter() - start)
    return 1e6 * statistics.median(times)


def service(editor: str, buffer_size: int) -> LevelServiceCore:
    cfg = LevelConfig(strategy="positive_value_loss", temperature=0.3, staleness_coef=0.3, rho=0.5,
                      replay_prob=0.8, buffer_size=buffer_size, robust=True, editor=editor)
    return LevelServiceCore(None, cfg, env=ENV, rng=0)


def one_round(core: LevelServiceCore, rng: np.random.Generator) -> float:
    start = time.perf_counter()
    ids, _, _ = core.draw_levels(COLUMNS)
    core.report_episodes(EpisodeResults(np.asarray(ids, dtype=np.int64), np.abs(rng.normal(size=COLUMNS)),
                                        np.full(COLUMNS, STEPS), np.zeros(COLUMNS), np.zeros(COLUMNS, dtype=bool)))
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--buffer-size", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=2000, help="timed rounds per arm")
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "out" / "bench_editor.json"))
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    cores = {arm: service(arm, args.buffer_size) for arm in ("none", "accel")}
    for core in cores.values():  # fill the buffer first: the rounds then replay and evict as in a long run
        while core.stats()["levels_buffered"] < args.buffer_size:
            one_round(core, rng)
    times: dict[str, list[float]] = {arm: [] for arm in cores}
    block = 50
    for _ in range(max(1, args.rounds // block)):
        for arm, core in cores.items():
            times[arm] += [one_round(core, rng) for _ in range(block)]
    rows = []
    for arm, ts in times.items():
        us = 1e6 * statistics.median(ts)
        rows.append({"editor": arm, "round_us": round(us, 1), "us_per_env_step": round(us / (COLUMNS * STEPS), 4),
                     "levels_edited": cores[arm].stats().get("levels_edited")})
    child = child_us(2000)
    print(f"one child (edit, BFS, encode), 13x13, 0-60 walls: {child:.1f} us (median of 2000)")
    print_table(rows, ["editor", "round_us", "us_per_env_step", "levels_edited"],
                title=f"service round: draw_levels({COLUMNS}) + the results of {COLUMNS} episodes of {STEPS} steps, "
                      f"full buffer of {args.buffer_size}, median of {len(times['none'])}")
    write_json(args.json, {"results": {"child_us": child, "rounds": rows, "buffer_size": args.buffer_size}},
               benchmark="bench_editor")
    return 0


if __name__ == "__main__":
    sys.exit(main())

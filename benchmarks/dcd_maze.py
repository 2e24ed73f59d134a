"""DCD's maze result at equal trained steps: domain randomisation, Robust PLR, ACCEL (and SFL) on `maze:13x13`,
tested zero-shot on the hand-designed suite at five budgets of steps trained on.

    python -m benchmarks.dcd_maze                  # runs (or continues) benchmarks/sweeps/dcd_maze.yaml, then reports
    python -m benchmarks.dcd_maze --analyse        # reports the sweep directory as it is now, finished or not
        [--spec dcd_maze|curriculum_maze] [--out-dir DIR] [--parallel 2] [--json PATH] [--mirror]

`--spec curriculum_maze` is the four-curricula comparison (`benchmarks/sweeps/curriculum_maze.yaml`: SFL beside
the three, on DCD's view, every arm the learner its header names): the same report, with SFL paired against every
other arm and its buffer's learnability and success rate against trained steps.

The arms are DCD's MiniGrid comparison of ACCEL (Parker-Holder et al. 2022, `facebookresearch/dcd`'s `60_blocks`
configs; `benchmarks/sweeps/dcd_maze.yaml` says which keys) over the unbounded level space, each with DCD's LSTM-256
student, run as a `levelray sweep` with `budget_unit: trained_steps`: every arm trains on the same number of env
steps (`samples_trained`), as DCD compares at equal student updates, so Robust PLR and ACCEL play about twice DR's
env steps to get there.

Per arm, at each budget: the suite's solved rate (the mean over mazes of each maze's success rate) as mean and 95%
Student-t interval over seeds (the learning curve against trained steps), with the paired differences ACCEL - DR,
Robust PLR - DR and ACCEL - Robust PLR (same seed), and, a secondary measure, the mean of each run's last three
checkpoints (`late_suite`) with its paired differences; each maze's rate against trained steps (a table per arm and
a figure), with the paired differences per maze at the last budget; at the last budget the generated 25- and 50-wall
mazes (DR's own training distribution, reported apart), and both together by the shortest path of each level
(`PATH_BINS`; every arm plays the same generated levels, so the rates pair by seed); the env steps played and the
trained share; the buffer's complexity (mean walls, mean shortest path of the levels it holds) against trained
steps; the learner's entropy before each budget; the stretches of each run in which its policy never moved
(`still_spells`: a collapse an evaluation can land in). DCD's own runs stand beside, for the ordering (its per-seed
results, mean ± 95% interval, and Welch's interval of the differences, its arms sharing no seeds): its budget is 20k
updates of 32 x 256 steps (163.84M trained steps) on its 12 mazes. `--analyse` reads whatever the sweep directory
holds (a trial's evaluations so far, its metrics so far), so the first runs' curves, trained share and buffer can be
looked at before all seeds are spent.

`--mirror` also plays each finished run's last checkpoint on the suite flipped left to right: a mirrored maze is
as hard as its original, yet a policy that prefers one hand at corners solves one and not the other (seed 0's
Robust PLR: spiral 0.41 and its mirror 0.00, zigzag 0.00 and 0.62), so one orientation measures a habit as much
as a skill, and the habit can flip between checkpoints. Reported: each arm's suite, mirror, both together and
|maze - mirror|, and the paired differences over both.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import yaml

from benchmarks.accel_maze import GENERATED, GENERATED_SETS, complexity_curve, curve_records, print_complexity
from benchmarks.common import (
    LEVELRAY,
    ROOT,
    budget_names,
    fmt_ci,
    load_sweep,
    paired,
    print_table,
    run_levelray,
    run_sweep,
    write_json,
)
from levelray.deploy.report.runs import load_run
from levelray.deploy.report.stats import ci_summary, welch_ci
from levelray.deploy.sweep.metrics import evaluation_file
from levelray.deploy.sweep.trial import trial_dir
from levelray.families.maze.level import shortest_path_length, suite_level, suite_names

DCD_TRAINED_STEPS = 20_000 * 32 * 256  # DCD's 20k PPO updates of 32 envs x 256 steps
# DCD's own runs at 20k updates, each seed's mean solved rate over its 12 mazes, from the per-seed, per-maze
# `solved_rate` rows of facebookresearch/dcd's results/minigrid_ood/{mg_60_blocks-accel,
# mg_60_blocks_uni-robust_plr, mg_60_blocks_uni-dr}_20k_updates.csv (5 seeds each, no seed shared across arms).
DCD_SUITE_BY_SEED = {"dr": (0.632, 0.410, 0.726, 0.636, 0.698), "robust": (0.719, 0.728, 0.768, 0.536, 0.792),
                     "accel": (0.913, 0.951, 0.785, 0.950, 0.774)}
# (x, y): the paired difference y - x, where both arms are in the spec; every curriculum against DR, SFL against
# every other arm
PAIRS = (("dr", "accel"), ("dr", "robust"), ("robust", "accel"), ("dr", "sfl"), ("robust", "sfl"), ("accel", "sfl"))
SHORT_PATH = 8  # moves: a level the agent can solve by walking to a goal it nearly sees
# shortest-path ranges (moves, [low, high)) the generated mazes' solved rate is split by: half of them are under 10
# moves, a twentieth 20 or more, where the suite's mazes are 24-96
PATH_BINS = ((1, 10), (10, 20), (20, 1000))
REFERENCE_LEVELS = 2000  # fresh levels whose complexity the buffers' is set beside
MIRROR, MIRROR_SUFFIX = "mirror", "_mirror"  # evaluate-mirror.json; comb -> comb_mirror.txt
SUITE_EPISODES = 100  # sampled episodes a suite maze, as the spec's suite evaluation
LATE_BUDGETS = 3  # the last checkpoints a run's suite score is averaged over (a secondary measure: `late_suite`)
ENTROPY_WINDOW = 2_000_000  # trained steps before a budget whose reports' learner entropy is averaged
STILL_RETURN, STILL_ENTROPY_TOL = 0.05, 0.03  # a report of a policy that never moves (`still_spells`)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--spec", default="dcd_maze", choices=("dcd_maze", "curriculum_maze"),
                   help="the sweep spec in benchmarks/sweeps/ (and the default names of --out-dir and --json)")
    p.add_argument("--out-dir", help="the sweep directory (default benchmarks/out/SPEC)")
    p.add_argument("--parallel", type=int, default=2)
    p.add_argument("--analyse", action="store_true", help="report the sweep directory as it is; run nothing")
    p.add_argument("--json", help="the report's JSON (default benchmarks/out/SPEC.json)")
    p.add_argument("--mirror", action="store_true",
                   help="also play each finished run's last checkpoint on the suite flipped left to right (100 "
                        "episodes a maze, kept in the run as evaluate-mirror.json), to tell skill from handedness")
    args = p.parse_args(argv)
    args.out_dir = args.out_dir or str(ROOT / "benchmarks" / "out" / args.spec)
    args.json = args.json or str(ROOT / "benchmarks" / "out" / f"{args.spec}.json")
    return args


def evaluations(run: Path, names: list[tuple[int, int | None]]) -> dict[int, dict]:
    """Budget -> {"suite": evaluate json, "generated": evaluate json} of the budgets the run has reached; `names`:
    `benchmarks.common.budget_names` of the spec (the files the sweep wrote at each budget)."""
    out = {}
    for budget, earlier in names:
        suite, generated = run / evaluation_file(None, earlier), run / evaluation_file(GENERATED, earlier)
        if suite.exists() and generated.exists():
            out[budget] = {"suite": json.loads(suite.read_text()), "generated": json.loads(generated.read_text())}
    return out


def write_mirror_suite(folder: Path) -> Path:
    """The suite's mazes flipped left to right (`MazeLevel.mirrored`), one `<name>_mirror.txt` each: a folder
    for `levelray evaluate --levels maze-file:FOLDER`."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in suite_names():
        (folder / f"{name}{MIRROR_SUFFIX}.txt").write_text(suite_level(name).mirrored().to_text())
    return folder


def mirror_evaluation(run: Path, folder: Path, samples_trained: int) -> dict[str, float]:
    """{maze name: success rate} of the run's last checkpoint on the mirrored suite in `folder`, played once
    (`levelray evaluate`, 100 sampled episodes a maze, as the suite) and kept as `evaluate-mirror.json`; the
    checkpoint must be the one evaluated at the last budget (`samples_trained`)."""
    cached = run / evaluation_file(MIRROR)
    if not cached.exists():
        stdout = run_levelray([*LEVELRAY, "evaluate", str(run), "--levels", f"maze-file:{folder}", "--episodes",
                               str(SUITE_EPISODES), "--json"], run / "evaluate-mirror.log",
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
        cached.write_text(stdout)
    out = json.loads(cached.read_text())
    if out["samples_trained"] != samples_trained:
        raise SystemExit(f"{cached}: played a checkpoint at {out['samples_trained']:,} trained steps, the last "
                         f"budget's evaluation one at {samples_trained:,}")
    return {name: out["results"][f"{name}{MIRROR_SUFFIX}"]["success_rate"] for name in suite_names()}


def replay_profile(run: Path, env: dict) -> dict | None:
    """What the newest checkpoint's level buffer replays: its levels' mean shortest path (over solvable ones)
    plain and weighted by the replay distribution P, and P's share on the top level and on paths under
    `SHORT_PATH` moves; its distinct starts (cell and heading) and P's share on the most replayed one. `env`: the
    run's env section. None without a buffer (domain randomisation), a checkpoint, or a level in the buffer yet (SFL
    before its first batch)."""
    from levelray.deploy.report.runs import load_level_state
    from levelray.families.maze.level import MazeLevel, level_for_id, maze_size, parse_blocks
    from levelray.level_service.spaces import level_encodings, levels_view

    checkpoints = sorted((run / "checkpoints").glob("ckpt-*"))
    sampler = load_level_state(checkpoints[-1] / "levels.msgpack") if checkpoints else None
    if sampler is None:
        return None
    view = levels_view(sampler)
    if not len(view.seeds):
        return None
    encodings = level_encodings(sampler, view.seeds.tolist())
    width, height = maze_size(env["id"])
    blocks = parse_blocks(env["maze_blocks"])
    levels = [MazeLevel.decode(encodings[i]) if i in encodings else level_for_id(i, width, height, blocks)
              for i in view.seeds.tolist()]
    paths = np.array([shortest_path_length(level) or -1 for level in levels], dtype=np.float64)
    weights, solvable = view.weights, paths > 0
    start_p: dict[tuple, float] = {}  # P on each start (cell, heading): edits never move it, a lineage keeps it
    for level, w in zip(levels, weights.tolist(), strict=True):
        start_p[(level.agent, level.agent_dir)] = start_p.get((level.agent, level.agent_dir), 0.0) + w
    return {"levels": len(levels), "mean_path": float(paths[solvable].mean()),
            "starts": len(start_p), "top_start_p": max(start_p.values()),
            "replayed_path": float((weights * paths)[solvable].sum() / max(weights[solvable].sum(), 1e-12)),
            "top_level_p": float(weights.max()), "short_path_p": float(weights[solvable & (paths < SHORT_PATH)].sum()),
            "mean_walls": float(np.mean([level.num_walls for level in levels]))}


def reference_complexity(env: dict, n: int = REFERENCE_LEVELS) -> dict[str, dict[str, float | None]]:
    """What the buffers' complexity is measured against: `contracts.status.LEVEL_COMPLEXITY_KEYS` (as the level
    service reports its buffer's) over `n` fresh levels of DR's family (`env`: its env section; seeds 0..n-1) and
    over the hand-designed suite."""
    from levelray.families.maze.level import maze_size, parse_blocks, suite_level_id
    from levelray.families.maze.stats import MazeComplexity

    complexity = MazeComplexity(*maze_size(env["id"]), parse_blocks(env["maze_blocks"]))
    return {"fresh levels (DR)": complexity.summary(np.arange(n)),
            "suite": complexity.summary([suite_level_id(m) for m in suite_names()])}


def path_bin_name(low: int, high: int) -> str:
    """A `PATH_BINS` range as the report names it: "10-19", and "20+" for the open-ended last one."""
    return f"{low}-{high - 1}" if high < 1000 else f"{low}+"


@functools.cache
def generated_path(seed: int, walls: int, width: int, height: int) -> int:
    """Shortest path (moves) of the level `maze-<walls>` plays under `seed`; 0 when the goal cannot be reached."""
    from levelray.families.maze.level import level_for_id, parse_blocks

    return shortest_path_length(level_for_id(seed, width, height, parse_blocks(str(walls)))) or 0


def solved_by_path(generated: dict) -> dict[str, float | None]:
    """Success rate on the solvable generated levels of both `GENERATED_SETS` together, per `PATH_BINS` range of
    their shortest path (None for a range without a level). `generated`: an `evaluate-generated` json, whose
    sets list each episode's level seed and return (a return above 0 is a solved episode)."""
    from levelray.families.maze.level import maze_size

    width, height = maze_size(generated["env"])
    paths, solved = [], []
    for name in GENERATED_SETS:
        result, walls = generated["results"][name], int(name.split("-")[1])
        paths += [generated_path(int(s), walls, width, height) for s in result["seeds"]]
        solved += [r > 0 for r in result["returns"]]
    paths_a, solved_a = np.array(paths), np.array(solved)
    rates = {}
    for low, high in PATH_BINS:
        inside = (paths_a >= low) & (paths_a < high)
        rates[path_bin_name(low, high)] = float(solved_a[inside].mean()) if inside.any() else None
    return rates


def trial_result(run: Path, arm: str, seed: int, names: list[tuple[int, int | None]]) -> dict:
    """One run's numbers so far: its evaluations at each budget reached (`names`: `budget_names`) and its training
    records."""
    loaded = load_run(run) if (run / "metrics.jsonl").exists() else {"records": [], "config": {}}
    records = loaded["records"]
    last = records[-1] if records else {}
    evals = evaluations(run, names)
    out = {"arm": arm, "seed": seed, "run_dir": str(run), "env_steps": last.get("env_steps", 0),
           "samples_trained": last.get("samples_trained", 0),
           "wall_s": last["time"] - records[0]["time"] if records else None,  # evaluations and restarts included
           "levels_edited": last.get("levels_edited"), "training_return_last100": last.get("episode_return_mean"),
           "complexity": complexity_curve(records, "samples_trained"),
           "learnability": learnability_curve(records),
           "entropy": entropy_at(records, [b for b, _ in names]),
           "still_spells": still_spells(records),
           "replay": replay_profile(run, loaded["config"].get("env", {})) if loaded["config"] else None,
           "budgets": {}}
    out["trained_fraction"] = out["samples_trained"] / out["env_steps"] if out["env_steps"] else None
    for budget, ev in evals.items():
        suite = ev["suite"]
        out["budgets"][budget] = {
            "env_steps": suite["env_steps"], "samples_trained": suite["samples_trained"],
            "suite_solved": suite["maze_suite"]["success_rate"],
            "mazes": {m: suite["results"][m]["success_rate"] for m in suite["maze_suite"]["mazes"]},
            **{s: ev["generated"]["results"][s]["success_rate"] for s in GENERATED_SETS},
            "by_path": solved_by_path(ev["generated"])}
    return out


def sweep_results(out: Path, spec: dict) -> list[dict]:
    """`trial_result` of every trial of the sweep in `out` (its `spec`) that has a run directory so far."""
    names = budget_names(spec, list(spec["budgets"]))
    return [trial_result(trial_dir(out, arm, seed), arm, seed, names)
            for seed in spec["seeds"] for arm in spec["arms"] if trial_dir(out, arm, seed).exists()]


def still_spells(records: list[dict], num_actions: int = 7) -> list[tuple[float, float]]:
    """The stretches `(first, last)` trained steps of a run's reports in which its policy never moved: no return
    (< `STILL_RETURN`) and the entropy at ln(num_actions - 1) (within `STILL_ENTROPY_TOL`), i.e. "forward" at
    probability ~0 and the other actions uniform, so every episode ends at the time limit. Learners fall into it on
    mazes and may not leave it (benchmarks/RESULTS.md, "The bf16 LSTM core against float32 on mazes")."""
    still_entropy = math.log(num_actions - 1)
    spells: list[tuple[float, float]] = []
    previous_still = False
    for record in records:
        still = (record.get("episode_return_mean", 1.0) < STILL_RETURN
                 and abs(record.get("learner_entropy", 0.0) - still_entropy) < STILL_ENTROPY_TOL)
        if still and previous_still:
            spells[-1] = (spells[-1][0], record["samples_trained"])
        elif still:
            spells.append((record["samples_trained"], record["samples_trained"]))
        previous_still = still
    return spells


def entropy_at(records: list[dict], budgets: list[int]) -> dict[int, float]:
    """Budget -> the mean learner entropy (nats, of the batches trained on) over the reports in the
    `ENTROPY_WINDOW` trained steps up to it, for the budgets with such a report: what the curricula's
    standardised advantages do to the policy on the levels they replay, beside DR's."""
    out = {}
    for budget in budgets:
        window = [r["learner_entropy"] for r in records if r.get("learner_entropy") is not None
                  and budget - ENTROPY_WINDOW < r["samples_trained"] <= budget]
        if window:
            out[budget] = float(np.mean(window))
    return out


def learnability_curve(records: list[dict]) -> list[dict]:
    """SFL's buffer at the evenly spaced records that hold it (`curve_records`): trained steps, its mean learnability
    p(1 - p) and mean success rate p (`levels_mean_learnability`, `levels_mean_success_rate`). Empty for the
    other arms."""
    return [{"samples_trained": r["samples_trained"], "learnability": r["levels_mean_learnability"],
             "success_rate": r.get("levels_mean_success_rate")}
            for r in curve_records(records, "levels_mean_learnability")]


def print_learnability(results: list[dict]) -> None:
    """Each run's `learnability` curve (SFL's), a point per tenth: "trained steps: learnability / success rate"."""
    for r in results:
        if r.get("learnability"):
            points = "  ".join(f"{p['samples_trained'] / 1e6:.1f}M {p['learnability']:.3f}/"
                               f"{p['success_rate'] if p['success_rate'] is not None else float('nan'):.2f}"
                               for p in r["learnability"])
            print(f"{r['arm']} seed {r['seed']}: {points}")


def evaluated_at(results: list[dict], budget: int, key: str) -> list[dict]:
    """`{arm, seed, key}` of the runs evaluated at `budget` (`trial_result`'s `budgets`)."""
    return [{"arm": r["arm"], "seed": r["seed"], key: r["budgets"][budget][key]} for r in results
            if budget in r["budgets"]]


def late_suite(results: list[dict], budgets: list[int]) -> list[dict]:
    """`{arm, seed, late_suite}` of the runs evaluated at each of the last `LATE_BUDGETS` budgets: the mean of their
    suite scores. One checkpoint's score swings by up to 0.3 from the next (a policy's habits at corners change
    between checkpoints, and a near-deterministic policy solves a maze always or never), so the mean of three says
    more about the arm than the last one alone; the last budget stays the primary measure."""
    late = budgets[-LATE_BUDGETS:]
    return [{"arm": r["arm"], "seed": r["seed"],
             "late_suite": float(np.mean([r["budgets"][b]["suite_solved"] for b in late]))}
            for r in results if all(b in r["budgets"] for b in late)]


def summarise(results: list[dict], arms: list[str], budgets: list[int]) -> dict:
    """Per arm and budget the seed means, and the paired differences of `PAIRS`. The differences are computed here
    (`paired` without the sweep) rather than read from results.json: that holds finished trials only, each arm
    against DR, while this reads the runs still training and pairs Robust PLR with ACCEL too."""
    curve = {a: {b: ci_summary([r["suite_solved"] for r in evaluated_at(results, b, "suite_solved")
                                if r["arm"] == a]) for b in budgets} for a in arms}
    pairs = [(x, y) for x, y in PAIRS if x in arms and y in arms]
    paired_suite = {b: {f"{y}-{x}": paired(evaluated_at(results, b, "suite_solved"), x, y, "suite_solved")
                        for x, y in pairs} for b in budgets}
    late = late_suite(results, budgets)
    late_summary = {"arms": {a: ci_summary([r["late_suite"] for r in late if r["arm"] == a]) for a in arms},
                    "paired": {f"{y}-{x}": paired(late, x, y, "late_suite") for x, y in pairs}}
    final = budgets[-1]
    maze_curves = {a: {m: {b: ci_summary([r["budgets"][b]["mazes"][m] for r in results
                                          if r["arm"] == a and b in r["budgets"]]) for b in budgets}
                       for m in suite_names()} for a in arms}
    mazes = {a: {m: maze_curves[a][m][final] for m in suite_names()} for a in arms}
    at_final = evaluated_at(results, final, "mazes")
    paired_mazes = {f"{y}-{x}": {m: paired([{**r, "solved": r["mazes"][m]} for r in at_final], x, y, "solved")
                                 for m in suite_names()} for x, y in pairs}
    generated = {a: {s: ci_summary([r[s] for r in evaluated_at(results, final, s) if r["arm"] == a])
                     for s in GENERATED_SETS} for a in arms}
    paired_generated = {f"{y}-{x}": {s: paired(evaluated_at(results, final, s), x, y, s) for s in GENERATED_SETS}
                        for x, y in pairs}
    bins = [path_bin_name(*b) for b in PATH_BINS]
    at_final_paths = [{**r, **r["by_path"]} for r in evaluated_at(results, final, "by_path")]
    by_path = {a: {b: ci_summary([r[b] for r in at_final_paths if r["arm"] == a and r[b] is not None])
                   for b in bins} for a in arms}
    paired_by_path = {f"{y}-{x}": {b: paired([r for r in at_final_paths if r[b] is not None], x, y, b) for b in bins}
                      for x, y in pairs}
    entropy = {a: {b: ci_summary([r["entropy"][b] for r in results if r["arm"] == a and b in r["entropy"]])
                   for b in budgets} for a in arms}
    shares = {a: ci_summary([r["trained_fraction"] for r in results if r["arm"] == a and final in r["budgets"]])
              for a in arms}  # finished runs only: a running one is still in its buffer's warm-up share
    dcd = {"suite_solved": {a: ci_summary(DCD_SUITE_BY_SEED[a]) for a in arms if a in DCD_SUITE_BY_SEED},
           "difference": {f"{y}-{x}": welch_ci(DCD_SUITE_BY_SEED[y], DCD_SUITE_BY_SEED[x]) for x, y in PAIRS
                          if {x, y} <= set(arms) & set(DCD_SUITE_BY_SEED)}}
    return {"suite_solved": curve, "paired_suite_solved": paired_suite, "late_suite": late_summary, "dcd": dcd,
            "mazes": mazes, "maze_curves": maze_curves, "paired_mazes": paired_mazes, "generated": generated,
            "paired_generated": paired_generated,
            "generated_by_path": by_path, "paired_generated_by_path": paired_by_path, "trained_fraction": shares,
            "entropy": entropy}


def spells_text(spells: list[tuple[float, float]]) -> str:
    """`still_spells` as "1.0-1.8, 3.2" (millions of trained steps; a lone report as one number), "-" for none."""
    return ", ".join(f"{a / 1e6:.1f}" if a == b else f"{a / 1e6:.1f}-{b / 1e6:.1f}" for a, b in spells) or "-"


def print_report(results: list[dict], summary: dict, arms: list[str], budgets: list[int]) -> None:
    print_table([[r["arm"], r["seed"], f"{r['samples_trained']:,}", f"{r['env_steps']:,}",
                  None if r["trained_fraction"] is None else round(r["trained_fraction"], 3),
                  round(r["wall_s"] or 0), r["levels_edited"], spells_text(r["still_spells"]),
                  *(r["budgets"].get(b, {}).get("suite_solved") for b in budgets)] for r in results],
                ["arm", "seed", "trained", "env steps", "trained share", "wall s", "edited", "never moved (M)",
                 *(f"suite@{b / 1e6:g}M" for b in budgets)], title="runs (suite solved at each budget reached)")
    print()
    dcd = summary["dcd"]
    print_table([[a, *(fmt_ci(summary["suite_solved"][a][b]) for b in budgets), fmt_ci(dcd["suite_solved"].get(a))]
                 for a in arms], ["arm", *(f"{b / 1e6:g}M trained" for b in budgets), "DCD (its 12 mazes, 163.84M)"],
                title="suite solved rate, mean ± 95% CI over seeds, against trained steps")
    print()
    pairs = sorted({p for b in budgets for p in summary["paired_suite_solved"][b]})
    print_table([[p, *(fmt_ci(summary["paired_suite_solved"][b].get(p)) for b in budgets),
                  fmt_ci(dcd["difference"].get(p))] for p in pairs],
                ["paired (same seed)", *(f"{b / 1e6:g}M" for b in budgets), "DCD at 163.84M (unpaired, Welch)"],
                title="paired difference of the suite solved rate")
    print()
    late = summary["late_suite"]
    late_names = "/".join(f"{b / 1e6:g}" for b in budgets[-LATE_BUDGETS:])
    print_table([*([a, fmt_ci(late["arms"][a])] for a in arms), *([p, fmt_ci(d)] for p, d in late["paired"].items())],
                ["arm / paired (same seed)", f"mean of {late_names}M"],
                title="the suite solved rate averaged over each run's last checkpoints (secondary)")
    print()
    pairs = list(summary["paired_mazes"])
    shape = {m: (suite_level(m).num_walls, shortest_path_length(suite_level(m))) for m in suite_names()}
    print_table([[m, *shape[m], *(fmt_ci(summary["mazes"][a][m], ".2f") for a in arms),
                  *(fmt_ci(summary["paired_mazes"][p][m], ".2f") for p in pairs)] for m in suite_names()],
                ["maze", "walls", "path", *arms, *(f"{p} (paired)" for p in pairs)],
                title=f"each suite maze at {budgets[-1]:,} trained steps")
    for arm in arms:
        print()
        print_table([[m, *(fmt_ci(summary["maze_curves"][arm][m][b], ".2f") for b in budgets)]
                     for m in suite_names()], ["maze", *(f"{b / 1e6:g}M" for b in budgets)],
                    title=f"{arm}: each suite maze against trained steps")
    print()
    print_table([*([a, *(fmt_ci(summary["generated"][a][s]) for s in GENERATED_SETS),
                    fmt_ci(summary["trained_fraction"][a])] for a in arms),
                 *([p, *(fmt_ci(d[s]) for s in GENERATED_SETS), None]
                   for p, d in summary["paired_generated"].items())],
                ["arm / paired (same seed)", *GENERATED_SETS, "trained share"],
                title="generated mazes (DR's training distribution) at the last budget; trained share of env steps "
                      "(finished runs)")
    print()
    print_table([[a, *(fmt_ci(summary["entropy"][a][b], ".2f") for b in budgets)] for a in arms],
                ["arm", *(f"{b / 1e6:g}M" for b in budgets)],
                title=f"learner entropy (nats, of the batches trained on; ln 7 = 1.95 is uniform), mean over the "
                      f"reports in the {ENTROPY_WINDOW / 1e6:g}M trained steps up to each budget")
    print()
    bins = [path_bin_name(*b) for b in PATH_BINS]
    print_table([[name, *(fmt_ci(table[b]) for b in bins)] for name, table in
                 [*summary["generated_by_path"].items(), *summary["paired_generated_by_path"].items()]],
                ["arm / paired (same seed)", *(f"path {b}" for b in bins)],
                title="generated mazes (both sets, solvable levels) solved by shortest path, at the last budget")
    print()
    print_table([[r["arm"], r["seed"], r["replay"]["levels"], round(r["replay"]["mean_walls"], 1),
                  round(r["replay"]["mean_path"], 2), round(r["replay"]["replayed_path"], 2),
                  round(r["replay"]["short_path_p"], 3), round(r["replay"]["top_level_p"], 3),
                  r["replay"]["starts"], round(r["replay"]["top_start_p"], 3)] for r in results if r["replay"]],
                ["arm", "seed", "levels", "mean walls", "mean path", "P-weighted path", f"P(path < {SHORT_PATH})",
                 "P(top level)", "starts", "P(top start)"], title="what each buffer replays, at its newest checkpoint")
    print("\nthe buffer's complexity (mean walls / mean shortest path), seed mean over finished runs, at tenths")
    print_complexity([r for r in results if budgets[-1] in r["budgets"]], arms, "samples_trained")
    for name, c in summary["reference_complexity"].items():
        print(f"{name}: {c['levels_mean_walls']:.1f}/{c['levels_mean_path_length']:.1f} "
              f"({1 - c['levels_unsolvable_fraction']:.0%} solvable)")
    if any(r.get("learnability") for r in results):
        print("\nSFL's buffer: mean learnability p(1 - p) / mean success rate p, against trained steps")
        print_learnability(results)


def draw_curve(ax, curve: dict, budgets: list[int], label: str) -> None:
    """One arm's seed mean and 95% band against trained steps. `curve`: budget -> ci_summary."""
    points = [(b, curve[b]) for b in budgets if curve[b]["n"]]
    if not points:
        return
    x = [b / 1e6 for b, _ in points]
    mean = [s["mean"] for _, s in points]
    half = [s["ci95"] or 0.0 for _, s in points]
    ax.plot(x, mean, marker="o", label=f"{label} (n={points[-1][1]['n']})")
    ax.fill_between(x, [m - h for m, h in zip(mean, half, strict=True)],
                    [m + h for m, h in zip(mean, half, strict=True)], alpha=0.2)
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)


def summarise_mirror(results: list[dict], arms: list[str], final: int) -> dict:
    """The last budget's suite beside its mirror, over the runs played on both: per arm the suite, the mirror,
    both together (the mean over the 20 mazes) and the handedness (the mean over mazes of |maze - mirror|), each
    mean ± 95% CI over seeds; the paired differences of both together; per maze the seed means of each side."""
    runs = [{"arm": r["arm"], "seed": r["seed"], "suite": r["budgets"][final]["suite_solved"],
             "maze": r["budgets"][final]["mazes"], "mirror": r["mirror"]} for r in results if r.get("mirror")]
    for r in runs:
        r["mirror_suite"] = float(np.mean(list(r["mirror"].values())))
        r["both"] = (r["suite"] + r["mirror_suite"]) / 2
        r["handedness"] = float(np.mean([abs(r["maze"][m] - r["mirror"][m]) for m in suite_names()]))
    keys = ("suite", "mirror_suite", "both", "handedness")
    return {"arms": {a: {k: ci_summary([r[k] for r in runs if r["arm"] == a]) for k in keys} for a in arms},
            "paired_both": {f"{y}-{x}": paired(runs, x, y, "both") for x, y in PAIRS if x in arms and y in arms},
            "mazes": {m: {a: [float(np.mean([r[side][m] for r in runs if r["arm"] == a] or [np.nan]))
                              for side in ("maze", "mirror")] for a in arms} for m in suite_names()}}


def print_mirror(mirror: dict, arms: list[str], final: int) -> None:
    print_table([[a, *(fmt_ci(mirror["arms"][a][k]) for k in ("suite", "mirror_suite", "both", "handedness"))]
                 for a in arms], ["arm", "suite", "mirrored suite", "both (20 mazes)", "|maze - mirror|"],
                title=f"the suite and its mirror image at {final:,} trained steps (last checkpoint)")
    print()
    print_table([[p, fmt_ci(d)] for p, d in mirror["paired_both"].items()], ["paired (same seed)", "both"],
                title="paired difference over the suite and its mirror")
    print()
    print_table([[m, *(f"{v[0]:.2f} / {v[1]:.2f}" for a in arms for v in [mirror["mazes"][m][a]])]
                 for m in suite_names()], ["maze", *(f"{a}: maze / mirror" for a in arms)],
                title="each maze and its mirror image, seed mean")


def plot_curves(summary: dict, arms: list[str], budgets: list[int], path: Path) -> list[Path]:
    """Two figures: the suite solved rate against trained steps per arm (at `path`), and each suite maze's
    (`path` with `_mazes` added), seed mean and 95% interval at each budget. Returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 4))
    for arm in arms:
        draw_curve(ax, summary["suite_solved"][arm], budgets, arm)
    ax.set_xlabel("trained steps (millions)")
    ax.set_ylabel("suite solved rate (zero-shot)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    mazes = suite_names()
    cols = 5
    fig, axes = plt.subplots(-(-len(mazes) // cols), cols, figsize=(3.2 * cols, 2.8 * -(-len(mazes) // cols)),
                             sharex=True, sharey=True, squeeze=False)
    for ax, maze in zip(axes.flat, mazes, strict=False):
        for arm in arms:
            draw_curve(ax, summary["maze_curves"][arm][maze], budgets, arm)
        ax.set_title(maze)
    for ax in axes[-1]:
        ax.set_xlabel("trained steps (M)")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    per_maze = path.with_name(f"{path.stem}_mazes{path.suffix}")
    fig.savefig(per_maze, dpi=110)
    plt.close(fig)
    return [path, per_maze]


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    out = Path(args.out_dir)
    if args.analyse:  # the spec the directory's sweep runs (what `levelray sweep` keeps beside its trials)
        spec = yaml.safe_load((out / "sweep.yaml").read_text())
    else:
        spec = load_sweep(args.spec)
        run_sweep(spec, out, args.parallel)
    arms, budgets = list(spec["arms"]), list(spec["budgets"])
    results = sweep_results(out, spec)
    if args.mirror:  # the mazes in a folder of their own: `out` may be a committed archive (sweep_archive)
        with tempfile.TemporaryDirectory() as tmp:
            folder = write_mirror_suite(Path(tmp))
            for r in results:
                if budgets[-1] in r["budgets"]:
                    r["mirror"] = mirror_evaluation(Path(r["run_dir"]), folder,
                                                    r["budgets"][budgets[-1]]["samples_trained"])
    summary = summarise(results, arms, budgets)
    summary["reference_complexity"] = reference_complexity({**spec["base"]["env"], **spec["arms"]["dr"]["env"]})
    if args.mirror:
        summary["mirror"] = summarise_mirror(results, arms, budgets[-1])
    print(f"{spec['base']['env']['id']}, budgets {budgets} trained steps ({budgets[-1] / DCD_TRAINED_STEPS:.1%} of "
          f"DCD's {DCD_TRAINED_STEPS:,}), {len(results)} runs so far")
    print_report(results, summary, arms, budgets)
    if args.mirror:
        print()
        print_mirror(summary["mirror"], arms, budgets[-1])
    figures = plot_curves(summary, arms, budgets, Path(args.json).with_suffix(".png"))
    print(f"learning curves: {', '.join(map(str, figures))}")
    write_json(args.json, {"results": {"spec": spec, "dcd_trained_steps": DCD_TRAINED_STEPS, "summary": summary,
                                       "runs": results, "dcd_suite_by_seed": DCD_SUITE_BY_SEED}}, benchmark=args.spec)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`levelray report RUN_DIR [RUN_DIR ...] [--out DIR]`: an HTML page of runs, with its figures and a summary.

Reads each run's `config.yaml`, `metrics.jsonl` and checkpoints, and writes (matplotlib, Agg, no display):

    returns.png            train `episode_return_mean` and held-out `test_return_mean` against env steps,
                           one line per run and kind, labelled "<run> (<level strategy>) train|test" (no
                           strategy where the run's levels are not worth naming: `runs.has_levels`)
    returns_trained.png    the same against trained steps (`samples_trained`, `test_samples_trained`): runs
                           compared at equal gradient updates, as DCD compares curricula
    throughput.png         env steps/s against env steps
    policy_lag.png         mean policy lag (versions) against env steps
    losses.png             learner total/policy/value loss and entropy against env steps
    model_loss.png         with `--model-loss muzero`: the model loss and each of its terms against env steps
    level_weights.png      heat map of the PLR replay distribution (reports x levels) of the first PLR run
    level_staleness.png    heat map of level staleness (reports x levels) of the same run; neither heat map
                           draws a level-buffer run (`--num-levels 0` with a scored strategy): its buffered
                           seeds change at each eviction, so a column would not be one level
    level_buffer.png       left: the scored levels' score distribution (`level_score`: median, p25-p75 band,
                           min-max band) and `levels_buffered` (right axis), right: `levels_replay_fraction`,
                           against env steps, one colour per run (level-buffer and fixed-set PLR runs)
    curriculum_complexity.png
                           maze runs: the mean wall count, mean shortest path (start to goal, over the solvable
                           levels) and unsolvable share of the scored levels against env steps, one line per run
    replay_priorities.png  the replay buffer's priority histogram (latest) of each run with replay
    summary.md             per run: config highlights, final env steps, train/test return, steps/s
    return_bands.png       with `--group-by PATH` (e.g. `levels.strategy`): the runs grouped by that config
                           value (the arms of a comparison, one run per seed), each group's mean train and
                           held-out return against env steps with its 95% Student-t confidence band; the
                           groups' final returns with intervals go into summary.md. A sweep directory
                           (`levelray report SWEEP_DIR`, `deploy.sweep.report`) is grouped by its arms
    level_gallery_run<i>_<env steps>.png
                           each PLR run's levels (of its set or its buffer): the first frame of the 16 most and
                           16 least likely levels at the end of the run and at up to 3 earlier checkpoints
                           (`deploy.report.gallery`); an ACCEL run's edited levels are drawn from their
                           encodings
    maze_suite.png         maze runs: every maze of the zero-shot test suite, as the env draws it
    index.html             one page with all of the above, the runs' configs side by side and the videos found
                           in the run directories, copied into videos/ (`deploy.report.html`)

Level heat maps come from the `level_weights` / `level_staleness` vectors of `metrics.jsonl` records
where present, else from the level sampler states saved in the run's checkpoints (one row per kept
checkpoint). The replay histogram comes from `replay_priority_hist` (or `replay.priority_hist`) records,
{edges, counts}, else from the replay state of the latest checkpoint. A figure without data is skipped,
with the reason in the returned dict and in summary.md.

This module writes summary.md and runs the command; reading the runs is `deploy.report.runs`, drawing the
figures `deploy.report.figures`, the level gallery `deploy.report.gallery`, the page `deploy.report.html`.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from levelray.contracts.config import ConfigError, leaves
from levelray.deploy.report.figures import (
    bands_figure,
    complexity_figure,
    level_buffer_figure,
    level_figure,
    line_figure,
    losses_figure,
    model_loss_figure,
    priorities_figure,
    returns_figure,
)
from levelray.deploy.report.gallery import gallery_figure, suite_figure
from levelray.deploy.report.html import write_page
from levelray.deploy.report.runs import group_runs, label_runs, last_value, load_run


def check_group_by(path: str) -> None:
    """`--group-by` must name a config leaf (`levels.strategy`, `model_loss.loss`, ...)."""
    if path not in {leaf for leaf, _field, _type in leaves()}:
        raise ConfigError(f"--group-by must be a dotted config key such as levels.strategy or learner.batch_size, "
                          f"got {path!r}")


def _fmt(v, spec: str = ".2f") -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float) and not math.isfinite(v):
        return "n/a"
    return format(v, spec)


def _fmt_ci(value: dict) -> str:
    if value["mean"] is None:
        return "n/a"
    spec = ",.0f" if abs(value["mean"]) >= 1000 else ".3f"
    half = "" if value["ci95"] is None else f" ± {format(value['ci95'], spec)}"
    return f"{format(value['mean'], spec)}{half} (n={value['n']})"


def steps_per_second(records: list[dict]) -> float | None:
    """The mean of the reports' env steps/s; for a run whose reports have none (a run shorter than a report
    interval, written before the first report had a rate), its env steps over its elapsed seconds."""
    sps = [r["env_steps_per_second"] for r in records if (r.get("env_steps_per_second") or 0) > 0]
    if sps:
        return float(np.mean(sps))
    steps, elapsed = last_value(records, "env_steps"), last_value(records, "elapsed_s")
    return steps / elapsed if steps and elapsed else None


def run_summary(run: dict) -> dict[str, Any]:
    """The summary of a run: its config highlights and last values. What does not apply to the run is None: the
    distribution mode outside procgen, the levels and level strategy of a run whose levels are not worth naming
    (`runs.has_levels`)."""
    recs = run["records"]
    cfg = run["config"]
    env, actors, learner = cfg.get("env") or {}, cfg.get("actors") or {}, cfg.get("learner") or {}
    levels = run.get("levels", True)
    return {
        "label": run["label"],
        "path": str(run["path"]),
        "env": env.get("id"),
        "distribution_mode": env.get("distribution_mode") if str(env.get("id", "")).startswith("procgen:") else None,
        "num_levels": env.get("num_levels") if levels else None,
        "level_strategy": (cfg.get("levels") or {}).get("strategy") if levels else None,
        "replay_ratio": (cfg.get("replay") or {}).get("replay_ratio"),
        "backend": cfg.get("backend"),
        "actors": f"{actors.get('num_actors')} x {actors.get('envs_per_actor')} envs, unroll "
                  f"{actors.get('unroll_length')}, batch {learner.get('batch_size')}",
        "learning_rate": learner.get("learning_rate"),
        "reports": len(recs),
        "env_steps": last_value(recs, "env_steps"),
        "learner_version": last_value(recs, "learner_version"),
        "train_return": last_value(recs, "episode_return_mean"),
        "test_return": last_value(recs, "test_return_mean"),
        "test_version": last_value(recs, "test_version"),
        "steps_per_second_mean": steps_per_second(recs),
        "policy_lag_mean": last_value(recs, "policy_lag_mean"),
    }


# what each column of the runs table means, said under it for the columns it has
COLUMN_NOTES = {
    "train return": "Train return: mean of the last 100 training episodes at the last report.",
    "test return": "Test return: the last held-out evaluation during training (`--eval-interval`).",
    "steps/s": "Steps/s: env steps per second, the mean of the reports'.",
    "policy lag": "Policy lag: learner version minus the acting policy's, mean at the last report; an inline run's "
                  "actors act with the learner's own weights, so its lag is 0.",
}
NOT_APPLICABLE = "—"


def runs_note(columns: list[str]) -> str:
    """The note under the runs table: its columns' meanings, and that a column no run has is left out."""
    notes = [COLUMN_NOTES[c] for c in columns if c in COLUMN_NOTES]
    return " ".join([*notes, f"{NOT_APPLICABLE}: does not apply to the run; a column that applies to no run, or has "
                              "no value for any, is left out."])
GROUPS_NOTE = "Mean of the runs' last values, ± the 95% Student-t half-width (n: runs)."


def _drop_empty_columns(columns: list[str], cells: list[list[str]], keep: int = 1) -> tuple[list[str], list[list[str]]]:
    """The table without the columns (after the first `keep`) that have nothing for any row (`n/a` or `—`)."""
    shown = [j for j in range(len(columns))
             if j < keep or any(row[j] not in ("n/a", NOT_APPLICABLE) for row in cells)]
    return [columns[j] for j in shown], [[row[j] for j in shown] for row in cells]


def _runs_row(s: dict) -> list[str]:
    levels = NOT_APPLICABLE if s["level_strategy"] is None else ("unbounded" if s["num_levels"] == 0
                                                                  else str(s["num_levels"]))
    lag = (f"{_fmt(s['policy_lag_mean'])} (inline)" if s["backend"] == "inline" and s["policy_lag_mean"] is not None
           else _fmt(s["policy_lag_mean"]))
    return [s["label"], str(s["env"]) + (f" ({s['distribution_mode']})" if s["distribution_mode"] else ""), levels,
            s["level_strategy"] or NOT_APPLICABLE, "off" if not s["replay_ratio"] else str(s["replay_ratio"]),
            _fmt(s["env_steps"], ",d"), _fmt(s["train_return"]), _fmt(s["test_return"]),
            _fmt(s["steps_per_second_mean"], ",.0f"), lag]


def runs_table(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """(columns, cells) of the per-run summary table; `rows` are `run_summary` dicts. A column that applies to
    no run (levels and strategy of CartPole runs, test return without held-out evaluations) is left out."""
    columns = ["run", "env", "levels", "strategy", "replay ratio", "env steps", "train return", "test return",
               "steps/s", "policy lag"]
    return _drop_empty_columns(columns, [_runs_row(s) for s in rows], keep=2)


def groups_table(figures: dict[str, dict]) -> tuple[list[str], list[list[str]]] | None:
    """(columns, cells) of the `--group-by` groups' final values with 95% intervals; None without groups."""
    groups = (figures.get("return_bands") or {}).get("groups")
    if not groups:
        return None
    cells = [[name, str(len(g["runs"]))] + [_fmt_ci(g[k]) for k in ("final_env_steps", "final_train_return",
                                                                     "final_test_return")]
             for name, g in groups.items()]
    return _drop_empty_columns(["group", "n", "env steps", "train return", "test return"], cells, keep=2)


def _markdown_table(columns: list[str], cells: list[list[str]]) -> list[str]:
    return (["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
            + ["| " + " | ".join(row) + " |" for row in cells])


def summary_markdown(runs: list[dict], figures: dict[str, dict],
                     tables: list[tuple[str, str, list[str], list[list[str]]]] = ()) -> str:
    rows = [run_summary(r) for r in runs]
    columns, cells = runs_table(rows)
    lines = ["# levelray report", "", f"{len(runs)} run(s). All of it on one page, with the level gallery and the "
             "runs' videos: [index.html](index.html).", "", *_markdown_table(columns, cells), "",
             runs_note(columns), ""]
    for s in rows:
        lines += [f"## {s['label']}", "", f"- directory: `{s['path']}`", f"- backend: {s['backend']}, "
                  f"actors: {s['actors']}, learning rate {s['learning_rate']}",
                  f"- {s['reports']} reports, final env steps {_fmt(s['env_steps'], ',d')}, learner version "
                  f"{s['learner_version']}", ""]
    groups = groups_table(figures)
    if groups is not None:
        lines += ["## Groups", "", GROUPS_NOTE, "", *_markdown_table(*groups), ""]
    for title, note, columns, cells in tables:
        lines += [f"## {title}", "", note, "", *_markdown_table(columns, cells), ""]
    lines += ["## Figures", ""]
    for name, fig in figures.items():
        if fig.get("path"):
            files = ", ".join(f"[{Path(p).name}]({Path(p).name})" for p in fig.get("paths", [fig["path"]]))
            lines.append(f"- {name}: {files}: {', '.join(fig['series'])}")
        else:
            lines.append(f"- {name}: skipped ({fig.get('skipped')})")
    return "\n".join(lines) + "\n"


def make_report(run_dirs: list[Path], out_dir: Path, group_by: str | None = None, *,
                arms: dict[str, list[Path]] | None = None,
                tables: list[tuple[str, str, list[str], list[list[str]]]] = ()) -> dict[str, dict]:
    """Write every figure and summary.md into `out_dir`; returns {name: {path, series, ...}} (a skipped
    figure has `path: None` and `skipped: reason`). `group_by`: a config key whose values split the runs
    into the arms of a comparison (return_bands.png and the summary's Groups table). `arms`: the arms named
    (a sweep's: arm -> its run directories among `run_dirs`), drawn the same way where `group_by` is not given.
    `tables`: (title, note, columns, cells) added to summary.md and the page after the runs' tables."""
    if not run_dirs:
        raise ConfigError("report: give at least one RUN_DIR")
    if group_by is not None:
        check_group_by(group_by)
    runs = [load_run(p) for p in run_dirs]
    label_runs(runs)
    groups = None
    if group_by is not None:
        groups = group_runs(runs, group_by)
    elif arms:
        by_path = {r["path"].resolve(): r for r in runs}
        groups = {arm: [by_path[Path(p).resolve()] for p in paths] for arm, paths in arms.items()}
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = {
        "returns": returns_figure(runs, out_dir / "returns.png"),
        "returns_trained": returns_figure(runs, out_dir / "returns_trained.png", "trained steps"),
        "throughput": line_figure(runs, out_dir / "throughput.png", "Throughput", "env steps / s",
                                   "env_steps_per_second"),
        "policy_lag": line_figure(runs, out_dir / "policy_lag.png", "Policy lag (learner version - actor's)",
                                   "mean lag (versions)", "policy_lag_mean"),
        "losses": losses_figure(runs, out_dir / "losses.png"),
        "model_loss": model_loss_figure(runs, out_dir / "model_loss.png"),
        "level_weights": level_figure(runs, out_dir / "level_weights.png", "weights"),
        "level_staleness": level_figure(runs, out_dir / "level_staleness.png", "staleness"),
        "level_buffer": level_buffer_figure(runs, out_dir / "level_buffer.png"),
        "curriculum_complexity": complexity_figure(runs, out_dir / "curriculum_complexity.png"),
        "replay_priorities": priorities_figure(runs, out_dir / "replay_priorities.png"),
    }
    if groups is not None:
        figures["return_bands"] = bands_figure(groups, out_dir / "return_bands.png")
    figures["maze_suite"] = suite_figure(runs, out_dir / "maze_suite.png")
    figures["level_gallery"] = gallery_figure(runs, out_dir)
    summary = out_dir / "summary.md"
    summary.write_text(summary_markdown(runs, figures, tables))
    columns, cells = runs_table([run_summary(r) for r in runs])
    page_tables = [("Runs", runs_note(columns), columns, cells)]
    group_cells = groups_table(figures)
    if group_cells is not None:
        page_tables.append((f"Groups ({group_by or 'arms'})", GROUPS_NOTE, *group_cells))
    page = write_page(runs, figures, [*page_tables, *tables], out_dir)
    labels = [r["label"] for r in runs]
    figures["summary"] = {"path": str(summary), "series": labels}
    figures["page"] = {"path": str(page), "series": labels}
    return figures


def add_report_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                   help="run directories (overlaid in the figures), or one sweep directory (its arms side by side)")
    p.add_argument("--out", default=None, help="output directory (default: RUN_DIR/report of the first run)")
    p.add_argument("--group-by", default=None, metavar="KEY",
                   help="config key whose values are the arms of a comparison (e.g. levels.strategy): draw each "
                        "group's mean return with a 95%% confidence band over its runs (return_bands.png)")
    p.add_argument("--json", action="store_true", help="print the figures and their series as JSON")


def cmd_report(args: argparse.Namespace) -> int:
    run_dirs = [Path(p) for p in args.run_dirs]
    out = Path(args.out) if args.out else run_dirs[0] / "report"
    show_figures(make_report(run_dirs, out, args.group_by), out, as_json=args.json)
    return 0


def show_figures(figures: dict[str, dict], out: Path, *, as_json: bool = False) -> None:
    """Print what `make_report` wrote: the figures' paths (or why one was skipped), or all of it as JSON."""
    if as_json:
        print(json.dumps(figures), flush=True)
        return
    print(f"levelray: report in {out}", flush=True)
    for name, fig in figures.items():
        if fig.get("path"):
            more = len(fig.get("paths", [])) - 1
            print(f"  {name:<18} {fig['path']}" + (f" (and {more} more)" if more > 0 else ""), flush=True)
        else:
            print(f"  {name:<18} skipped: {fig['skipped']}", flush=True)

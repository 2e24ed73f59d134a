"""`levelray report RUN_DIR [RUN_DIR ...] [--out DIR]`: PNG figures and a Markdown summary of runs.

Reads each run's `config.yaml`, `metrics.jsonl` and checkpoints, and writes (matplotlib, Agg, no display):

    returns.png            train `episode_return_mean` and held-out `test_return_mean` against env steps,
                           one line per run and kind, labelled "<run> (<level strategy>) train|test"
    throughput.png         env steps/s against env steps
    policy_lag.png         mean policy lag (versions) against env steps
    losses.png             learner total/policy/value loss and entropy against env steps
    model_loss.png         with `--model-loss muzero`: the model loss and each of its terms against env steps
    level_weights.png      heat map of the PLR replay distribution (reports x levels) of the first PLR run
    level_staleness.png    heat map of level staleness (reports x levels) of the same run
    replay_priorities.png  the replay buffer's priority histogram (latest) of each run with replay
    summary.md             per run: config highlights, final env steps, train/test return, steps/s
    return_bands.png       with `--group-by PATH` (e.g. `levels.strategy`): the runs grouped by that config
                           value (the arms of a comparison, one run per seed), each group's mean train and
                           held-out return against env steps with its 95% Student-t confidence band; the
                           groups' final returns with intervals go into summary.md

Level heat maps come from the `level_weights` / `level_staleness` vectors of `metrics.jsonl` records
where present, else from the level sampler states saved in the run's checkpoints (one row per kept
checkpoint). The replay histogram comes from `replay_priority_hist` (or `replay.priority_hist`) records,
{edges, counts}, else from the replay state of the latest checkpoint. A figure without data is skipped,
with the reason in the returned dict and in summary.md.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from levelray.contracts.config import MODEL_LOSS_TERMS, ConfigError, leaves
from levelray.contracts.levels import UNSCORED_STRATEGIES
from levelray.deploy.stats import ci_summary, mean_ci

BAND_POINTS = 60  # env-step grid the grouped curves are interpolated onto


# ----------------------------------------------------------------------------------- loading runs
def load_run(path: str | Path) -> dict[str, Any]:
    """{name, path, config (dict), strategy, label, records} of one run directory."""
    import yaml

    p = Path(path)
    if not p.is_dir():
        raise ConfigError(f"RUN_DIR: {p} is not a directory")
    metrics = p / "metrics.jsonl"
    if not metrics.exists():
        raise ConfigError(f"RUN_DIR: {p} has no metrics.jsonl (is it a levelray run directory?)")
    records = []
    lines = metrics.read_text().splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if i < len(lines) - 1:  # only a torn last line (a run killed mid-write) is tolerated
                raise ConfigError(f"RUN_DIR: {metrics} line {i + 1} is not JSON") from None
    config: dict = {}
    if (p / "config.yaml").exists():
        config = yaml.safe_load((p / "config.yaml").read_text()) or {}
    strategy = (config.get("levels") or {}).get("strategy", "?")
    if ((config.get("env") or {}).get("num_levels", 1) or 0) <= 0:
        strategy = "unbounded levels"
    return {"name": p.name, "path": p, "config": config, "strategy": strategy, "records": records}


def _label_runs(runs: list[dict]) -> None:
    names = [r["name"] for r in runs]
    for r in runs:
        name = r["name"]
        if names.count(name) > 1:  # runs/a/run and runs/b/run: use the parent too
            name = f"{r['path'].parent.name}/{name}"
        r["label"] = f"{name} ({r['strategy']})"


def _series(records: list[dict], key: str, sub: str | None = None,
            x_key: str = "env_steps") -> tuple[np.ndarray, np.ndarray]:
    """(env steps, values) of every record with a finite `key` (`x_key` where present, else env_steps)."""
    xs, ys = [], []
    for rec in records:
        v = rec.get(key)
        if sub is not None:
            v = v.get(sub) if isinstance(v, dict) else None
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and "env_steps" in rec:
            xs.append(rec.get(x_key, rec["env_steps"]))
            ys.append(float(v))
    return np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)


def _checkpoint_dirs(run: dict) -> list[Path]:
    ckpts = run["path"] / "checkpoints"
    if not ckpts.is_dir():
        return []
    return sorted(p for p in ckpts.iterdir() if p.is_dir() and p.name.startswith("ckpt-"))


def _checkpoint_env_steps(ckpt: Path) -> int | None:
    try:
        meta = json.loads((ckpt / "meta.json").read_text())
        return int(meta["counters"]["env_steps"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def level_matrix(run: dict, kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, str] | None:
    """(env steps [R], level seeds [L], values [R, L], source) of `kind` in ("weights", "staleness"):
    from `level_<kind>` records, else from the checkpoints' level sampler states; None without data."""
    key = f"level_{kind}"
    rows = [(rec["env_steps"], rec[key]) for rec in run["records"] if isinstance(rec.get(key), list) and rec[key]]
    if rows:
        width = max(len(v) for _, v in rows)
        rows = [(s, v) for s, v in rows if len(v) == width]
        env = run["config"].get("env") or {}
        start = int(env.get("start_level", 0))
        seeds = np.arange(start, start + width)
        return (np.asarray([s for s, _ in rows], dtype=np.float64), seeds,
                np.asarray([v for _, v in rows], dtype=np.float64), "metrics.jsonl")
    from levelray.contracts import snapshot
    from levelray.level_service.sampler import LevelSampler

    steps, values, seeds = [], [], None
    for ckpt in _checkpoint_dirs(run):
        env_steps = _checkpoint_env_steps(ckpt)
        if env_steps is None or not (ckpt / "levels.msgpack").exists():
            continue
        try:
            sampler = LevelSampler.from_state_dict(snapshot.load(ckpt / "levels.msgpack"))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        row = sampler.sample_weights() if kind == "weights" else sampler.staleness()
        if seeds is not None and len(row) != len(seeds):
            continue
        seeds = sampler.seeds
        steps.append(env_steps)
        values.append(np.asarray(row, dtype=np.float64))
    if not steps:
        return None
    order = np.argsort(steps, kind="stable")
    return (np.asarray(steps, dtype=np.float64)[order], seeds, np.stack(values)[order],
            f"{len(steps)} checkpoints")


def priority_histogram(run: dict) -> tuple[np.ndarray, np.ndarray, str] | None:
    """(edges [n+1], counts [n], source) of the latest replay priority histogram; None without one."""
    for rec in reversed(run["records"]):
        hist = rec.get("replay_priority_hist")
        if hist is None and isinstance(rec.get("replay"), dict):
            hist = rec["replay"].get("priority_hist")
        if isinstance(hist, dict) and hist.get("edges") and sum(hist.get("counts") or []) > 0:
            return (np.asarray(hist["edges"], dtype=np.float64), np.asarray(hist["counts"], dtype=np.float64),
                    "metrics.jsonl")
    from levelray.contracts import snapshot

    for ckpt in reversed(_checkpoint_dirs(run)):
        path = ckpt / "replay.msgpack"
        if not path.exists():
            continue
        try:
            state = snapshot.load(path)
            rs = state.get("replay", state)
            raw = np.asarray(rs["raw_priorities"], dtype=np.float64)[np.asarray(rs["slot_ids"]) >= 0]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if raw.size:
            counts, edges = np.histogram(raw, bins=16)
            return edges, counts.astype(np.float64), f"checkpoint {ckpt.name}"
    return None


# ------------------------------------------------------------------------------------------ figures
def _figure(nrows: int = 1, ncols: int = 1, size: tuple[float, float] = (8, 4.5)):
    from matplotlib.figure import Figure  # no pyplot: no global backend, no display needed (Agg)

    fig = Figure(figsize=size, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def _save(fig, path: Path) -> None:
    fig.savefig(path, dpi=100)


def _labels(*axes) -> list[str]:
    out = []
    for ax in axes:
        out.extend(line.get_label() for line in ax.get_lines() if not line.get_label().startswith("_"))
    return out


def _line_figure(runs, out: Path, title: str, ylabel: str, key: str, sub: str | None = None) -> dict:
    fig, axes = _figure()
    ax = axes[0, 0]
    for run in runs:
        x, y = _series(run["records"], key, sub)
        if x.size:
            ax.plot(x, y, marker="." if x.size < 30 else None, label=run["label"])
    labels = _labels(ax)
    if not labels:
        return {"path": None, "series": [], "skipped": f"no run has {key!r} in metrics.jsonl"}
    ax.set(title=title, xlabel="env steps", ylabel=ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    _save(fig, out)
    return {"path": str(out), "series": labels}


def returns_figure(runs, out: Path) -> dict:
    fig, axes = _figure(size=(9, 5))
    ax = axes[0, 0]
    for i, run in enumerate(runs):
        color = f"C{i % 10}"
        x, y = _series(run["records"], "episode_return_mean")
        if x.size:
            ax.plot(x, y, color=color, label=f"{run['label']} train")
        x, y = _series(run["records"], "test_return_mean", x_key="test_env_steps")  # the evaluated version's steps
        if x.size:
            ax.plot(x, y, color=color, linestyle="--", marker="o", markersize=3, label=f"{run['label']} test")
    labels = _labels(ax)
    if not labels:
        return {"path": None, "series": [], "skipped": "no run has episode returns yet"}
    ax.set(title="Return: training levels (solid) and held-out levels (dashed)", xlabel="env steps",
           ylabel="mean episode return")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    _save(fig, out)
    return {"path": str(out), "series": labels}


def check_group_by(path: str) -> None:
    """`--group-by` must name a config leaf (`levels.strategy`, `model.loss`, ...)."""
    if path not in {leaf for leaf, _field, _type in leaves()}:
        raise ConfigError(f"--group-by must be a dotted config key such as levels.strategy or learner.batch_size, "
                          f"got {path!r}")


def group_runs(runs: list[dict], path: str) -> dict[str, list[dict]]:
    """{"<path>=<value>": runs} in the order the groups first appear. The level strategy is read as the
    report labels it (`unbounded levels` for a run without a level set)."""
    groups: dict[str, list[dict]] = {}
    for run in runs:
        if path == "levels.strategy":
            value = run["strategy"]
        else:
            value = run["config"]
            for part in path.split("."):
                value = value.get(part) if isinstance(value, dict) else None
        groups.setdefault(f"{path}={value}", []).append(run)
    return groups


def group_curve(runs: list[dict], key: str, x_key: str = "env_steps") -> dict[str, Any] | None:
    """The group's mean curve and 95% t-interval half-widths on a common env-step grid: each run's series
    is linearly interpolated onto `BAND_POINTS` steps spanning the range every run covers (no run is
    extrapolated). None when fewer than one run has the series or the ranges do not overlap."""
    series = [s for s in (_series(r["records"], key, x_key=x_key) for r in runs) if s[0].size >= 2]
    if not series:
        return None
    lo, hi = max(float(x[0]) for x, _ in series), min(float(x[-1]) for x, _ in series)
    if hi <= lo:
        return None
    grid = np.linspace(lo, hi, BAND_POINTS)
    curves = np.stack([np.interp(grid, x, y) for x, y in series])  # [runs, BAND_POINTS]
    stats = [mean_ci(curves[:, j].tolist()) for j in range(grid.size)]
    return {"steps": grid, "mean": np.array([m for m, _ in stats]), "half": np.array([h for _, h in stats]),
            "runs": len(series)}


def final_values(runs: list[dict], key: str) -> dict[str, Any]:
    """Mean and 95% t-interval of the runs' last `key` (n: how many runs have one)."""
    return ci_summary([_last(r["records"], key) for r in runs])


def bands_figure(runs: list[dict], out: Path, group_by: str) -> dict:
    groups = group_runs(runs, group_by)
    fig, axes = _figure(1, 2, size=(13, 5))
    panels = ((axes[0, 0], "episode_return_mean", "env_steps", "training levels"),
              (axes[0, 1], "test_return_mean", "test_env_steps", "held-out levels (--eval-interval)"))
    labels, summary = [], {}
    for i, (name, members) in enumerate(groups.items()):
        color = f"C{i % 10}"
        summary[name] = {"runs": [str(r["path"]) for r in members],
                         "final_train_return": final_values(members, "episode_return_mean"),
                         "final_test_return": final_values(members, "test_return_mean"),
                         "final_env_steps": final_values(members, "env_steps")}
        for ax, key, x_key, _title in panels:
            curve = group_curve(members, key, x_key)
            if curve is None:
                continue
            label = f"{name} (n={curve['runs']})"
            ax.plot(curve["steps"], curve["mean"], color=color, label=label)
            if curve["runs"] > 1:
                ax.fill_between(curve["steps"], curve["mean"] - curve["half"], curve["mean"] + curve["half"],
                                color=color, alpha=0.2, linewidth=0)
            labels.append(f"{label} {_title.split(' (')[0]}")
    if not labels:
        return {"path": None, "series": [], "groups": summary,
                "skipped": "no group has two or more reports with returns"}
    for ax, _key, _x, title in panels:
        ax.set(title=f"Mean return, {title}, 95% CI over runs", xlabel="env steps", ylabel="mean episode return")
        ax.grid(alpha=0.3)
        if _labels(ax):
            ax.legend(fontsize="small")
    _save(fig, out)
    return {"path": str(out), "series": labels, "groups": summary}


def _panels_figure(runs, out: Path, panels: list[tuple[str, str]], ncols: int, size: tuple[float, float],
                   skipped: str) -> dict:
    """One panel per (metrics.jsonl key, title), every run a line in each; skipped when no run has any key."""
    nrows = (len(panels) + ncols - 1) // ncols
    fig, axes = _figure(nrows, ncols, size=size)
    flat = axes.ravel()
    for ax, (key, title) in zip(flat, panels, strict=False):
        for run in runs:
            x, y = _series(run["records"], key)
            if x.size:
                ax.plot(x, y, label=f"{run['label']} {key.removeprefix('learner_')}")
        ax.set(title=title, xlabel="env steps")
        ax.grid(alpha=0.3)
        if ax.get_lines():
            ax.legend(fontsize="x-small")
    for ax in flat[len(panels):]:
        ax.set_visible(False)
    labels = _labels(*flat)
    if not labels:
        return {"path": None, "series": [], "skipped": skipped}
    _save(fig, out)
    return {"path": str(out), "series": labels}


def losses_figure(runs, out: Path) -> dict:
    panels = [("learner_loss_total", "total loss"), ("learner_loss_policy", "policy loss"),
              ("learner_loss_value", "value loss"), ("learner_entropy", "policy entropy")]
    return _panels_figure(runs, out, panels, 2, (11, 7), "no run has learner losses in metrics.jsonl")


def model_loss_figure(runs, out: Path) -> dict:
    """The model loss (`learner_model_loss`) and its terms, one panel for each that some run reported (the
    game-over and consistency terms are options)."""
    keys = [("learner_model_loss", "model loss (total)")] + [
        (f"learner_model_{term}_loss", f"{term} term") for term in MODEL_LOSS_TERMS]
    panels = [(key, title) for key, title in keys if any(key in r for run in runs for r in run["records"])]
    if not panels:
        return {"path": None, "series": [], "skipped": "no run has a model loss (--model-loss muzero) in metrics.jsonl"}
    ncols = min(3, len(panels))
    return _panels_figure(runs, out, panels, ncols, (4 * ncols, 3.5 * ((len(panels) + ncols - 1) // ncols)), "")


def _level_run(runs: list[dict]) -> list[dict]:
    """Runs in the order the level heat maps try them: PLR runs first, then uniform ones."""
    return ([r for r in runs if r["strategy"] not in UNSCORED_STRATEGIES]
            + [r for r in runs if r["strategy"] in UNSCORED_STRATEGIES])


def level_figure(runs, out: Path, kind: str) -> dict:
    for run in _level_run(runs):
        data = level_matrix(run, kind)
        if data is not None:
            break
    else:
        return {"path": None, "series": [],
                "skipped": f"no run has level_{kind} records or checkpoints with a level sampler state "
                           "(runs with --num-levels 0 have no level set)"}
    steps, seeds, values, source = data
    fig, axes = _figure(size=(10, 5))
    ax = axes[0, 0]
    rows = np.arange(len(steps) + 1) - 0.5
    cols = np.arange(len(seeds) + 1) - 0.5
    mesh = ax.pcolormesh(cols, rows, values, shading="flat", cmap="viridis")
    # one tick per row (at most ~10), labelled with the env steps of that report
    ticks = np.unique(np.linspace(0, len(steps) - 1, min(len(steps), 10)).round().astype(int))
    ax.set_yticks(ticks, [f"{int(steps[t]):,}" for t in ticks])
    xt = np.unique(np.linspace(0, len(seeds) - 1, min(len(seeds), 10)).round().astype(int))
    ax.set_xticks(xt, [str(int(seeds[t])) for t in xt])
    what = "PLR replay weight P(level)" if kind == "weights" else "staleness (samples since last sampled)"
    fig.colorbar(mesh, ax=ax, label=what)
    ax.set(title=f"{what} over time: {run['label']} (from {source})", xlabel="level seed",
           ylabel="env steps")
    _save(fig, out)
    return {"path": str(out), "series": [run["label"]], "source": source, "shape": list(values.shape)}


def priorities_figure(runs, out: Path) -> dict:
    fig, axes = _figure()
    ax = axes[0, 0]
    sources = {}
    for run in runs:
        hist = priority_histogram(run)
        if hist is None:
            continue
        edges, counts, source = hist
        ax.stairs(counts / max(counts.sum(), 1.0), edges, fill=False, linewidth=1.5, label=run["label"])
        sources[run["label"]] = source
    labels = [p.get_label() for p in ax.patches if not p.get_label().startswith("_")]
    if not labels:
        return {"path": None, "series": [],
                "skipped": "no run has a replay priority histogram (replay is off unless --replay-ratio > 0)"}
    ax.set(title="Replay priority distribution (latest)", xlabel="raw priority (|TD| mix)",
           ylabel="fraction of buffered unrolls")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    _save(fig, out)
    return {"path": str(out), "series": labels, "source": sources}


# ------------------------------------------------------------------------------------------ summary
def _last(records: list[dict], key: str):
    for rec in reversed(records):
        v = rec.get(key)
        if v is not None:
            return v
    return None


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


def run_summary(run: dict) -> dict[str, Any]:
    recs = run["records"]
    sps = [r["env_steps_per_second"] for r in recs if (r.get("env_steps_per_second") or 0) > 0]
    cfg = run["config"]
    env, actors, learner = cfg.get("env") or {}, cfg.get("actors") or {}, cfg.get("learner") or {}
    return {
        "label": run["label"],
        "path": str(run["path"]),
        "env": env.get("id"),
        "distribution_mode": env.get("distribution_mode"),
        "num_levels": env.get("num_levels"),
        "level_strategy": (cfg.get("levels") or {}).get("strategy"),
        "replay_ratio": (cfg.get("replay") or {}).get("replay_ratio"),
        "backend": cfg.get("backend"),
        "actors": f"{actors.get('num_actors')} x {actors.get('envs_per_actor')} envs, unroll "
                  f"{actors.get('unroll_length')}, batch {learner.get('batch_size')}",
        "learning_rate": learner.get("learning_rate"),
        "reports": len(recs),
        "env_steps": _last(recs, "env_steps"),
        "learner_version": _last(recs, "learner_version"),
        "train_return": _last(recs, "episode_return_mean"),
        "test_return": _last(recs, "test_return_mean"),
        "test_version": _last(recs, "test_version"),
        "steps_per_second_mean": float(np.mean(sps)) if sps else None,
        "policy_lag_mean": _last(recs, "policy_lag_mean"),
    }


def summary_markdown(runs: list[dict], figures: dict[str, dict]) -> str:
    rows = [run_summary(r) for r in runs]
    lines = ["# levelray report", "", f"{len(runs)} run(s).", "",
             "| run | env | levels | strategy | replay ratio | env steps | train return | test return "
             "| steps/s | policy lag |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for s in rows:
        lines.append(
            f"| {s['label']} | {s['env']} ({s['distribution_mode']}) | {s['num_levels']} | {s['level_strategy']} "
            f"| {s['replay_ratio']} | {_fmt(s['env_steps'], ',d')} | {_fmt(s['train_return'])} "
            f"| {_fmt(s['test_return'])} | {_fmt(s['steps_per_second_mean'], ',.0f')} "
            f"| {_fmt(s['policy_lag_mean'])} |")
    lines += ["", "Train return: mean of the last 100 training episodes at the last report. Test return: the last "
              "held-out evaluation (`--eval-interval`), n/a when the run had none.", ""]
    for s in rows:
        lines += [f"## {s['label']}", "", f"- directory: `{s['path']}`", f"- backend: {s['backend']}, "
                  f"actors: {s['actors']}, learning rate {s['learning_rate']}",
                  f"- {s['reports']} reports, final env steps {_fmt(s['env_steps'], ',d')}, learner version "
                  f"{s['learner_version']}", ""]
    bands = figures.get("return_bands") or {}
    if bands.get("groups"):
        lines += ["## Groups", "", "Mean of the runs' last values, ± the 95% Student-t half-width (n: runs).", "",
                  "| group | n | env steps | train return | test return |", "|---|---|---|---|---|"]
        for name, g in bands["groups"].items():
            cells = [_fmt_ci(g[k]) for k in ("final_env_steps", "final_train_return", "final_test_return")]
            lines.append(f"| {name} | {len(g['runs'])} | {' | '.join(cells)} |")
        lines.append("")
    lines += ["## Figures", ""]
    for name, fig in figures.items():
        if fig.get("path"):
            lines.append(f"- [{name}]({Path(fig['path']).name}): {', '.join(fig['series'])}")
        else:
            lines.append(f"- {name}: skipped ({fig.get('skipped')})")
    return "\n".join(lines) + "\n"


def make_report(run_dirs: list[Path], out_dir: Path, group_by: str | None = None) -> dict[str, dict]:
    """Write every figure and summary.md into `out_dir`; returns {name: {path, series, ...}} (a skipped
    figure has `path: None` and `skipped: reason`). `group_by`: a config key whose values split the runs
    into the arms of a comparison (return_bands.png and the summary's Groups table)."""
    if not run_dirs:
        raise ConfigError("report: give at least one RUN_DIR")
    if group_by is not None:
        check_group_by(group_by)
    runs = [load_run(p) for p in run_dirs]
    _label_runs(runs)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = {
        "returns": returns_figure(runs, out_dir / "returns.png"),
        "throughput": _line_figure(runs, out_dir / "throughput.png", "Throughput", "env steps / s",
                                   "env_steps_per_second"),
        "policy_lag": _line_figure(runs, out_dir / "policy_lag.png", "Policy lag (learner version - actor's)",
                                   "mean lag (versions)", "policy_lag_mean"),
        "losses": losses_figure(runs, out_dir / "losses.png"),
        "model_loss": model_loss_figure(runs, out_dir / "model_loss.png"),
        "level_weights": level_figure(runs, out_dir / "level_weights.png", "weights"),
        "level_staleness": level_figure(runs, out_dir / "level_staleness.png", "staleness"),
        "replay_priorities": priorities_figure(runs, out_dir / "replay_priorities.png"),
    }
    if group_by is not None:
        figures["return_bands"] = bands_figure(runs, out_dir / "return_bands.png", group_by)
    summary = out_dir / "summary.md"
    summary.write_text(summary_markdown(runs, figures))
    figures["summary"] = {"path": str(summary), "series": [r["label"] for r in runs]}
    return figures


def add_report_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories (overlaid in the figures)")
    p.add_argument("--out", default=None, help="output directory (default: RUN_DIR/report of the first run)")
    p.add_argument("--group-by", default=None, metavar="KEY",
                   help="config key whose values are the arms of a comparison (e.g. levels.strategy): draw each "
                        "group's mean return with a 95%% confidence band over its runs (return_bands.png)")
    p.add_argument("--json", action="store_true", help="print the figures and their series as JSON")


def cmd_report(args: argparse.Namespace) -> int:
    run_dirs = [Path(p) for p in args.run_dirs]
    out = Path(args.out) if args.out else run_dirs[0] / "report"
    figures = make_report(run_dirs, out, args.group_by)
    if args.json:
        print(json.dumps(figures), flush=True)
        return 0
    print(f"levelray: report in {out}", flush=True)
    for name, fig in figures.items():
        if fig.get("path"):
            print(f"  {name:<18} {fig['path']}", flush=True)
        else:
            print(f"  {name:<18} skipped: {fig['skipped']}", flush=True)
    return 0

"""The report's figures (matplotlib, Agg, no display), each drawn from the runs `deploy.report.runs` reads.

Each figure function returns `{path, series}` (the PNG and its line labels), or `{path: None, series: [],
skipped: reason}` when no run has its data; see `deploy.report.command` for the list of figures.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from levelray.contracts.config import MODEL_LOSS_TERMS
from levelray.contracts.levels import UNSCORED_STRATEGIES
from levelray.deploy.report.runs import (
    final_values,
    group_curve,
    group_point,
    level_matrix,
    priority_histogram,
    record_series,
    score_quantiles,
)


def _figure(nrows: int = 1, ncols: int = 1, size: tuple[float, float] = (8, 4.5)):
    from matplotlib.figure import Figure  # no pyplot: no global backend, no display needed (Agg)

    fig = Figure(figsize=size, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def _save(fig, path: Path) -> None:
    fig.savefig(path, dpi=100)


def _marker(x: np.ndarray) -> dict:
    """Markers on a series of few points: a run with one report (or reports at one env step) draws no line."""
    return {"marker": "o", "markersize": 3} if x.size < 30 else {}


def _labels(*axes) -> list[str]:
    out = []
    for ax in axes:
        out.extend(line.get_label() for line in ax.get_lines() if not line.get_label().startswith("_"))
    return out


def line_figure(runs, out: Path, title: str, ylabel: str, key: str, sub: str | None = None) -> dict:
    fig, axes = _figure()
    ax = axes[0, 0]
    for run in runs:
        x, y = record_series(run["records"], key, sub)
        if x.size:
            ax.plot(x, y, label=run["label"], **_marker(x))
    labels = _labels(ax)
    if not labels:
        return {"path": None, "series": [], "skipped": f"no run has {key!r} in metrics.jsonl"}
    ax.set(title=title, xlabel="env steps", ylabel=ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    _save(fig, out)
    return {"path": str(out), "series": labels}


# x of the returns figures: the records' key for a train point and for a held-out one (the evaluated version's)
RETURNS_X = {"env steps": ("env_steps", "test_env_steps"), "trained steps": ("samples_trained", "test_samples_trained")}


def returns_figure(runs, out: Path, against: str = "env steps") -> dict:
    """Train and held-out returns against env steps or against trained steps (`RETURNS_X`): at equal trained
    steps, runs that train on a different share of their env steps compare at equal gradient updates."""
    train_x, test_x = RETURNS_X[against]
    fig, axes = _figure(size=(9, 5))
    ax = axes[0, 0]
    for i, run in enumerate(runs):
        color = f"C{i % 10}"
        x, y = record_series(run["records"], "episode_return_mean", x_key=train_x, x_required=True)
        if x.size:
            ax.plot(x, y, color=color, label=f"{run['label']} train", **_marker(x))
        x, y = record_series(run["records"], "test_return_mean", x_key=test_x, x_required=against != "env steps")
        if x.size:
            ax.plot(x, y, color=color, linestyle="--", marker="o", markersize=3, label=f"{run['label']} test")
    labels = _labels(ax)
    if not labels:
        return {"path": None, "series": [], "skipped": f"no run has episode returns against {against} yet"}
    ax.set(title="Return: training levels (solid) and held-out levels (dashed)", xlabel=against,
           ylabel="mean episode return")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    _save(fig, out)
    return {"path": str(out), "series": labels}


def bands_figure(groups: dict[str, list[dict]], out: Path) -> dict:
    """Each group's (an arm's) mean train and held-out return with 95% t-bands over its runs."""
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
            if curve is not None:
                label = f"{name} (n={curve['runs']})"
                ax.plot(curve["steps"], curve["mean"], color=color, label=label)
                if curve["runs"] > 1:
                    ax.fill_between(curve["steps"], curve["mean"] - curve["half"], curve["mean"] + curve["half"],
                                    color=color, alpha=0.2, linewidth=0)
            elif (point := group_point(members, key, x_key)) is not None:  # no curve: the runs' last points
                label = f"{name} (n={point['runs']}, last reports)"
                ax.errorbar([point["x"]], [point["mean"]], yerr=None if point["half"] is None else [point["half"]],
                            color=color, marker="o", capsize=4, label=label)
            else:
                continue
            labels.append(f"{label} {_title.split(' (')[0]}")
    if not labels:
        return {"path": None, "series": [], "groups": summary, "skipped": "no group has returns in its reports"}
    for ax, _key, _x, title in panels:
        ax.set(title=f"Mean return, {title}, 95% CI over runs", xlabel="env steps", ylabel="mean episode return")
        ax.grid(alpha=0.3)
        if _labels(ax):
            ax.legend(fontsize="small")
        else:  # say why the panel is empty (no held-out evaluation during training), not empty axes
            ax.set_axis_off()
            ax.text(0.5, 0.5, f"no run has returns on {title}", ha="center", va="center", transform=ax.transAxes)
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
            x, y = record_series(run["records"], key)
            if x.size:
                ax.plot(x, y, label=f"{run['label']} {key.removeprefix('learner_')}", **_marker(x))
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
        buffers = [r["label"] for r in runs if r.get("buffer")]
        why = (f"; not drawn for level-buffer runs ({', '.join(buffers)}): a buffer's seeds change as levels are "
               "evicted, so a column would not be one level (level_buffer.png shows their scores)") if buffers else ""
        return {"path": None, "series": [],
                "skipped": f"no run has level_{kind} records or checkpoints with a level sampler state "
                           f"(runs with --num-levels 0 have no fixed level set){why}"}
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


def _score_panel(ax, right, run: dict, color: str) -> None:
    """One run's level-score distribution on `ax` (median line, p25-p75 band, lighter min-max band) and its
    `levels_buffered` on the twin axis `right` (dotted)."""
    x, q = score_quantiles(run["records"])
    if x.size:
        ax.fill_between(x, q["min"], q["max"], color=color, alpha=0.12, linewidth=0)
        ax.fill_between(x, q["p25"], q["p75"], color=color, alpha=0.3, linewidth=0)
        ax.plot(x, q["median"], color=color, marker="." if x.size < 30 else None,
                label=f"{run['label']} score median")
    x, y = record_series(run["records"], "levels_buffered")
    if x.size:
        right.plot(x, y, color=color, linestyle=":", label=f"{run['label']} levels buffered")


def level_buffer_figure(runs, out: Path) -> dict:
    """Two panels against env steps. Left: the score distribution of the scored levels (`level_score`: the
    buffered ones of a level-buffer run, the seen ones of a fixed set), each run's median with its p25-p75
    band and a lighter min-max band, and `levels_buffered` on the right axis. Right: `levels_replay_fraction`,
    the fraction of the episodes ended since the previous report that were played on a replayed level."""
    fig, axes = _figure(1, 2, size=(14, 5))
    ax, frac = axes[0, 0], axes[0, 1]
    right = ax.twinx()
    for i, run in enumerate(runs):
        color = f"C{i % 10}"
        if not any("levels_buffered" in r for r in run["records"]):
            continue  # no level service: its replay fraction is a constant 0, not a level curriculum's
        _score_panel(ax, right, run, color)
        x, y = record_series(run["records"], "levels_replay_fraction")
        if x.size:
            frac.plot(x, y, color=color, marker="." if x.size < 30 else None, label=f"{run['label']} replay fraction")
    labels = _labels(ax, right, frac)
    if not labels:
        return {"path": None, "series": [],
                "skipped": "no run has level_score, levels_buffered or levels_replay_fraction records of a level "
                           "service (a run without one, e.g. --num-levels 0 with a random strategy, has none)"}
    ax.set(title="Scores of the scored levels: median, p25-p75, min-max", xlabel="env steps", ylabel="level score")
    if right.get_lines():
        right.set_ylabel("levels buffered (dotted)")
    else:
        right.set_axis_off()
    frac.set(title="Replay fraction (episodes on a replayed level)", xlabel="env steps",
             ylabel="fraction since the previous report", ylim=(-0.03, 1.03))
    for a in (ax, frac):
        a.grid(alpha=0.3)
    handles = ax.get_lines() + right.get_lines()
    if handles:
        ax.legend(handles, [h.get_label() for h in handles], fontsize="x-small")
    if frac.get_lines():
        frac.legend(fontsize="small")
    _save(fig, out)
    return {"path": str(out), "series": labels}


# The `levels_*` keys every run with a level service has; any other is a measure the env family takes of its levels
# (`contracts.families.LevelStatistics`: a maze's levels_mean_walls, levels_mean_path_length, ...).
SERVICE_LEVEL_KEYS = {"levels_buffered", "levels_evicted", "levels_edited", "levels_replay_fraction",
                      "levels_trained_fraction"}


def level_statistic_keys(runs) -> list[str]:
    """The env families' measures of their levels that the runs' records hold, in the order first met."""
    keys: dict[str, None] = {}
    for run in runs:
        for record in run["records"]:
            keys.update((k, None) for k, v in record.items()
                        if k.startswith("levels_") and k not in SERVICE_LEVEL_KEYS and isinstance(v, int | float))
    return list(keys)


def complexity_figure(runs, out: Path) -> dict:
    """How the levels the curriculum holds look (the buffered levels, or the scored ones of a fixed set), in the env
    family's own measures, against env steps, one line per run in each panel: a maze run's mean walls, mean shortest
    path (BFS, cell moves) and unsolvable share."""
    panels = [(key, key.removeprefix("levels_").replace("_", " ").capitalize() + " of the scored levels")
              for key in level_statistic_keys(runs)]
    skipped = ("no run has records of its env family's level statistics (maze runs with a level service have "
               "levels_mean_walls, levels_mean_path_length and levels_unsolvable_fraction: --env maze:<W>x<H> with "
               "--num-levels N, or a scored strategy on --num-levels 0)")
    if not panels:
        return {"path": None, "series": [], "skipped": skipped}
    return _panels_figure(runs, out, panels, min(3, len(panels)), (16, 4.5), skipped)


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

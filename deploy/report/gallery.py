"""The report's level gallery: what the levels of a PLR run look like, and which of them PLR favours.

For each run with scored levels (a PLR strategy over a fixed set, or a level buffer: `--num-levels 0` with a PLR
strategy; a uniform baseline or domain randomisation has no level priorities to show) it draws, at the end of the
run and at up to `EARLIER_POINTS` kept checkpoints before,

    level_gallery_run<i>_<env steps>.png   left: the first frame of the 16 most likely levels under the replay
                                           distribution, right: the 16 least likely, each captioned with its
                                           seed, score, staleness and replay probability P

The sampler states are the `levels.msgpack` of the run's checkpoints (their `meta.json` gives the env steps; the
last one is written when the run ends) and, where it is newer than the latest checkpoint, the level service's own
snapshot `RUN_DIR/services/levels.msgpack` (Ray backend). Either kind of state is read through
`level_service.spaces.levels_view`, so a fixed set and a buffer are drawn alike; P is the view's `weights` (the
sampler's `sample_weights()`).

The least likely levels are taken among the *scored* levels (a fixed set's seen ones, a buffer's buffered ones),
and never repeat one of the most likely: an unseen level has P = 0 until its first episode is scored (PLR then
draws it as a new level, not as a replay), so listing unseen levels would show arbitrary seeds rather than the
levels PLR has scored and puts off.

Frames come from `actors.envs.level_frame` (procgen's rgb render of the level's first observation, MiniGrid's and
the maze family's full grid), rendered once per (env config, seed) for all points and runs. An edited maze level
(ACCEL, `levels.editor accel`) is drawn from the encoding its state holds, captioned with its id's offset in the
edited range (`edited #k`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from levelray.contracts.config import ConfigError, EnvConfig, from_dict
from levelray.contracts.families import ENV_FAMILIES
from levelray.contracts.levels import EDITED_ID_BASE, STRATEGIES, UNSCORED_STRATEGIES
from levelray.deploy.report.runs import checkpoint_dirs, checkpoint_env_steps, load_level_state

GALLERY_LEVELS = 16  # levels per side: the most and the least likely
EARLIER_POINTS = 3  # checkpoints before the end that get a gallery too (evenly spaced over the kept ones)
_GRID = 4  # each side is a 4 x 4 grid of frames


def _load_view(path: Path):
    """`(view, encodings)`: the `LevelView` of the sampler state saved at `path` (a checkpoint's or the service
    snapshot's, a fixed set or a buffer) and the encodings of its edited levels (`{id: bytes}`, ACCEL); None when
    it cannot be read or has scored no level yet (all P = 0)."""
    from levelray.level_service.spaces import level_encodings, levels_view

    sampler = load_level_state(path)
    if sampler is None:
        return None
    view = levels_view(sampler)
    return (view, level_encodings(sampler, view.seeds.tolist())) if view.scored.any() else None


def sampler_points(run: dict) -> list[dict[str, Any]]:
    """The sampler states the gallery draws, the end of the run first, then up to `EARLIER_POINTS` earlier
    ones, newest first: [{env_steps (None for the service snapshot), source, view (`spaces.LevelView`)}].
    States that have scored no level yet (all P = 0) are left out."""
    points = []
    for ckpt in checkpoint_dirs(run):
        env_steps = checkpoint_env_steps(ckpt)
        if env_steps is None or not (ckpt / "levels.msgpack").exists():
            continue
        loaded = _load_view(ckpt / "levels.msgpack")
        if loaded is not None:
            points.append({"env_steps": env_steps, "source": f"checkpoint {ckpt.name}", "view": loaded[0],
                           "encodings": loaded[1], "mtime": (ckpt / "levels.msgpack").stat().st_mtime})
    points.sort(key=lambda p: p["env_steps"])
    service = run["path"] / "services" / "levels.msgpack"
    if service.exists() and (not points or service.stat().st_mtime > points[-1]["mtime"]):
        loaded = _load_view(service)
        if loaded is not None:
            points.append({"env_steps": None, "source": "level service snapshot (after the last checkpoint)",
                           "view": loaded[0], "encodings": loaded[1], "mtime": service.stat().st_mtime})
    if not points:
        return []
    end, before = points[-1], points[:-1]
    if len(before) > EARLIER_POINTS:
        picks = np.unique(np.linspace(0, len(before) - 1, EARLIER_POINTS).round().astype(int))
        before = [before[i] for i in picks]
    return [end, *reversed(before)]


def choose_levels(view, k: int = GALLERY_LEVELS) -> tuple[list[dict], list[dict]]:
    """(most, least): the `k` scored levels of `view` (`spaces.LevelView`) with the highest replay probability,
    most likely first, and the `k` with the lowest among the rest, least likely first; each {seed, score,
    staleness, p}. Ties go to the lower seed."""
    p = np.asarray(view.weights, dtype=np.float64)
    seeds, scores, stale = np.asarray(view.seeds), view.scores, view.staleness
    seen = np.flatnonzero(view.scored)
    order = seen[np.lexsort((seeds[seen], -p[seen]))]  # P descending, then seed ascending

    def row(i: int) -> dict:
        return {"seed": int(seeds[i]), "score": float(scores[i]), "staleness": int(stale[i]), "p": float(p[i])}

    most = [row(i) for i in order[:k]]
    rest = order[k:]
    least = [row(i) for i in rest[np.lexsort((seeds[rest], p[rest]))][:k]]
    return most, least


def _caption(level: dict) -> str:
    seed = level["seed"]
    name = f"seed {seed}" if seed < EDITED_ID_BASE else f"edited #{seed - EDITED_ID_BASE}"
    return f"{name}\nscore {level['score']:.3g}  stale {level['staleness']}\nP {100 * level['p']:.3g}%"


def _draw_side(subfig, rows: int, title: str, levels: list[dict], frames: dict[int, np.ndarray]) -> None:
    axes = subfig.subplots(rows, _GRID, squeeze=False).ravel()
    for ax in axes:
        ax.set_axis_off()
    for ax, level in zip(axes, levels, strict=False):
        ax.imshow(frames[level["seed"]], interpolation="nearest")
        ax.set_title(_caption(level), fontsize=8, linespacing=1.1)
    subfig.suptitle(title, fontsize=12)


def draw_gallery(out: Path, title: str, most: list[dict], least: list[dict], frames: dict[int, np.ndarray]) -> None:
    """One PNG: the most likely levels' frames on the left, the least likely on the right (4 columns each, up to
    4 rows).
    `frames`: seed -> uint8 [H, W, 3]."""
    from matplotlib.figure import Figure

    rows = max(1, -(-max(len(most), len(least)) // _GRID))  # as many rows as the longer side fills
    fig = Figure(figsize=(16, 0.8 + 2.45 * rows), layout="constrained")
    left, right = fig.subfigures(1, 2, wspace=0.03)
    _draw_side(left, rows, f"{len(most)} most likely levels", most, frames)
    _draw_side(right, rows, f"{len(least)} least likely levels (of the other scored ones)" if least
               else "least likely: no scored level beyond the most likely ones", least, frames)
    fig.suptitle(title, fontsize=13)
    fig.savefig(out, dpi=100)


def _scored(run: dict) -> bool:
    """A run with level priorities: a scored strategy over a fixed set, a level buffer (`runs.load_run`), or a
    level source other than PLR (SFL's learnability)."""
    if run.get("buffer") or run.get("source", "plr") != "plr":
        return True
    return run["strategy"] in STRATEGIES and run["strategy"] not in UNSCORED_STRATEGIES


class _Frames:
    """First frames by (env config, seed), each rendered once."""

    def __init__(self):
        self._cache: dict[tuple[EnvConfig, int], np.ndarray] = {}

    def get(self, cfg: EnvConfig, seeds: list[int], encodings: dict[int, bytes] | None = None
            ) -> dict[int, np.ndarray]:
        """Frames of `seeds`; `encodings`: the levels among them that exist only as data (edited mazes)."""
        from levelray.actors.envs import level_frame

        for seed in seeds:
            if (cfg, seed) not in self._cache:
                frame = np.asarray(level_frame(cfg, seed, encodings))
                if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] != 3:
                    raise ValueError(f"level_frame({cfg.id!r}, {seed}) gave {frame.dtype} {frame.shape}, "
                                     "not uint8 [H, W, 3]")
                self._cache[(cfg, seed)] = frame
        return {seed: self._cache[(cfg, seed)] for seed in seeds}


def _run_gallery(run: dict, index: int, out_dir: Path, frames: _Frames) -> dict[str, Any]:
    """{label, points: [{env_steps, source, path, num_seen, num_levels, buffered, most, least}]} of one run, or
    {label, skipped: reason}. A buffer's `num_seen` / `num_levels` are its buffered levels / its capacity."""
    label = run["label"]
    points = sampler_points(run)
    if not points:
        return {"label": label, "skipped": "no checkpoint (or level service snapshot) with a level sampler state "
                                           "(a set's or a buffer's) that has scored a level"}
    try:
        env_cfg = from_dict(run["config"].get("env") or {}, EnvConfig, "env.")
    except ConfigError as exc:
        return {"label": label, "skipped": f"config.yaml: {exc}"}
    source = run.get("source", "plr")
    sampler = "PLR" if source == "plr" else source.upper() if source.isalpha() else source
    drawn = []
    for point in points:
        view = point["view"]
        most, least = choose_levels(view)
        try:
            images = frames.get(env_cfg, [lv["seed"] for lv in most + least], point["encodings"])
        except (ImportError, ValueError, RuntimeError, OSError) as exc:  # e.g. the report is made on a machine
            # without this env's package: the gallery is skipped with the reason, the rest of the report is not
            return {"label": label, "skipped": f"cannot render {env_cfg.id} levels here: "
                                               f"{type(exc).__name__}: {exc}"}
        steps = point["env_steps"]
        when = "end of run" if steps is None else f"{steps:,} env steps"
        name = f"level_gallery_run{index}_{'final' if steps is None else steps}.png"
        scored = int(view.scored.sum())
        held = (f"{scored} levels buffered, capacity {view.capacity}" if view.buffered
                else f"{scored} of {view.capacity} levels seen")
        title = f"{label}: levels under {sampler} at {when} ({held}; from {point['source']})"
        draw_gallery(out_dir / name, title, most, least, images)
        drawn.append({"env_steps": steps, "source": point["source"], "path": str(out_dir / name),
                      "num_seen": scored, "num_levels": int(view.capacity), "buffered": bool(view.buffered),
                      "most": most, "least": least})
    return {"label": label, "points": drawn}


def gallery_figure(runs: list[dict], out_dir: Path) -> dict[str, Any]:
    """The galleries of every run with a scored level set. Returns {path (the first run's end-of-run gallery),
    paths, series (run labels), galleries: [per run, see `_run_gallery`]}, or {path: None, series: [],
    skipped: reason} when no run has one."""
    scored = [(i, r) for i, r in enumerate(runs, start=1) if _scored(r)]
    if not scored:
        return {"path": None, "series": [], "skipped": "no run has scored levels: runs with a uniform strategy "
                                                       "(random, sequential), over a set or --num-levels 0, have "
                                                       "no level priorities to draw"}
    frames = _Frames()
    galleries = [_run_gallery(run, i, Path(out_dir), frames) for i, run in scored]
    paths = [p["path"] for g in galleries for p in g.get("points", [])]
    if not paths:
        return {"path": None, "series": [], "galleries": galleries,
                "skipped": "; ".join(f"{g['label']}: {g['skipped']}" for g in galleries)}
    return {"path": paths[0], "paths": paths, "series": [g["label"] for g in galleries if g.get("points")],
            "galleries": galleries}


def suite_figure(runs: list[dict], out: Path) -> dict[str, Any]:
    """Maze runs: each maze of the hand-designed test suite (`levelray evaluate --levels maze-suite`), its whole
    grid as the first maze run's env draws it, captioned with its name and shortest path. {path, series (the
    maze names)}, or {path: None, series: [], skipped: reason} without a maze run of the suite's size."""
    from matplotlib.figure import Figure

    mazes = ENV_FAMILIES.load("maze").level  # the maze family's levels (`families.maze.level`), found by name
    ENV_PREFIX, maze_size, shortest_path_length = mazes.ENV_PREFIX, mazes.maze_size, mazes.shortest_path_length
    suite_level, suite_level_id = mazes.suite_level, mazes.suite_level_id
    names = mazes.suite_names()
    size = (suite_level(names[0]).width, suite_level(names[0]).height) if names else None
    for run in runs:
        env = (run.get("config") or {}).get("env") or {}
        if str(env.get("id", "")).startswith(ENV_PREFIX) and maze_size(env["id"]) == size:
            env_cfg = from_dict(env, EnvConfig, "env.")
            break
    else:
        return {"path": None, "series": [], "skipped": f"no maze run of the suite's size ({size[0]}x{size[1]}: "
                                                       f"--env maze:{size[0]}x{size[1]})" if size else "no suite"}
    cols = 5
    rows = -(-len(names) // cols)
    fig = Figure(figsize=(3.2 * cols, 3.5 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    frames = _Frames().get(env_cfg, [suite_level_id(name) for name in names])
    for ax in axes:
        ax.set_axis_off()
    for ax, name in zip(axes, names, strict=False):
        ax.imshow(frames[suite_level_id(name)], interpolation="nearest")
        ax.set_title(f"{name} (path {shortest_path_length(suite_level(name))})", fontsize=10)
    fig.suptitle("The zero-shot test suite (levelray evaluate --levels maze-suite)", fontsize=13)
    fig.savefig(out, dpi=80)
    return {"path": str(out), "series": names}

"""The runs a report draws: each run directory's config, `metrics.jsonl` records and checkpoints, read into
the series, heat-map matrices, histograms and grouped curves that `deploy.report.figures` plots and
`deploy.report.command` summarises. A run is a dict `{name, path, config (dict), strategy, buffer, label, records}`;
`buffer` is True for a run whose level service keeps a level buffer (`--num-levels 0` with a scored strategy).
`read_records` reads `metrics.jsonl` for the report, the sweep (through `load_run`) and the benchmarks, so a run
killed mid-write reads the same in each. Nothing here imports Ray or an env library: the device run's report
(`benchmarks/gpu_report.py`) reads its runs with it on a machine that has neither."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from levelray.contracts.config import ConfigError
from levelray.contracts.levels import UNSCORED_STRATEGIES
from levelray.deploy.report.stats import ci_summary, mean_ci

BAND_POINTS = 60  # env-step grid the grouped curves are interpolated onto
SCORE_QUANTILES = ("min", "p25", "median", "p75", "max")  # the `level_score` keys the buffer figure draws


def has_levels(config: dict) -> bool:
    """Whether a run's levels are worth naming on the report: it has a level service (a fixed set, or a scored
    strategy's level buffer), or its env family's levels are different tasks (procgen's, MiniGrid's and the mazes'
    presets), where even domain randomisation over them is a choice of curriculum. CartPole's or an Atari game's
    levels are reset seeds that do not change the task: such a run without a level service shows none."""
    from levelray.contracts.presets import PRESETS, UNBOUNDED_DEFAULTS, family

    env, levels = config.get("env") or {}, config.get("levels") or {}
    if (env.get("num_levels", 1) or 0) > 0 or levels.get("strategy", "?") not in UNSCORED_STRATEGIES:
        return True
    name = family(str(env.get("id", "")))
    return name in PRESETS and name not in UNBOUNDED_DEFAULTS


def load_run(path: str | Path) -> dict[str, Any]:
    """{name, path, config (dict), source (`levels.source`), strategy, buffer, levels, records} of one run directory.
    `strategy` is how the report names the run's level sampling: the configured strategy over a fixed set,
    "<strategy>, level buffer" over an unbounded space (so a `--group-by levels.strategy` comparison keeps the
    two apart), "unbounded levels" for domain randomisation (no level service); a level source other than PLR in
    place of the strategy ("sfl, level buffer"). `levels`: whether the run's levels are worth naming
    (`has_levels`); its label leaves the strategy out where they are not."""
    import yaml

    p = Path(path)
    if not p.is_dir():
        raise ConfigError(f"RUN_DIR: {p} is not a directory")
    records = read_records(p)
    config: dict = {}
    if (p / "config.yaml").exists():
        config = yaml.safe_load((p / "config.yaml").read_text()) or {}
    levels = config.get("levels") or {}
    source = levels.get("source", "plr")
    # a level source of its own (SFL's) chooses the levels whatever `levels.strategy` says, so it names them
    strategy = levels.get("strategy", "?") if source == "plr" else source
    buffer = False
    if ((config.get("env") or {}).get("num_levels", 1) or 0) <= 0:
        buffer = source != "plr" or strategy not in UNSCORED_STRATEGIES
        strategy = f"{strategy}, level buffer" if buffer else "unbounded levels"
    return {"name": p.name, "path": p, "config": config, "source": source, "strategy": strategy, "buffer": buffer,
            "levels": has_levels(config), "records": records}


def read_records(path: str | Path, *, missing_ok: bool = False) -> list[dict[str, Any]]:
    """The records of a run's `metrics.jsonl` in file order; `path` is the run directory or the file itself.

    Blank lines are skipped, and so is a torn last line: the run appends one record a line, so a run being
    written (a benchmark polling it) or killed mid-write ends in a partial line, while a bad line before the last
    is a damaged file (ConfigError). No file is a ConfigError, or [] with `missing_ok` (a run that has not
    written its first record yet)."""
    p = Path(path)
    metrics = p if p.suffix == ".jsonl" else p / "metrics.jsonl"
    if not metrics.is_file():
        if missing_ok:
            return []
        raise ConfigError(f"RUN_DIR: {metrics.parent} has no metrics.jsonl (is it a levelray run directory?)")
    records = []
    lines = metrics.read_text().splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if i < len(lines) - 1:
                raise ConfigError(f"RUN_DIR: {metrics} line {i + 1} is not JSON") from None
    return records


def label_runs(runs: list[dict]) -> None:
    names = [r["name"] for r in runs]
    for r in runs:
        name = r["name"]
        if names.count(name) > 1:  # runs/a/run and runs/b/run: use the parent too
            name = f"{r['path'].parent.name}/{name}"
        r["label"] = f"{name} ({r['strategy']})" if r.get("levels", True) else name


def record_series(records: list[dict], key: str, sub: str | None = None,
            x_key: str = "env_steps", *, x_required: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(env steps, values) of every record with a finite `key` (`x_key` where present, else env_steps; with
    `x_required` only the records that have `x_key`)."""
    xs, ys = [], []
    for rec in records:
        if x_required and not isinstance(rec.get(x_key), int | float):
            continue
        v = rec.get(key)
        if sub is not None:
            v = v.get(sub) if isinstance(v, dict) else None
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and "env_steps" in rec:
            xs.append(rec.get(x_key, rec["env_steps"]))
            ys.append(float(v))
    return np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)


def checkpoint_dirs(run: dict) -> list[Path]:
    """The run's kept checkpoint directories, oldest first (their names hold the zero-padded version)."""
    ckpts = run["path"] / "checkpoints"
    if not ckpts.is_dir():
        return []
    return sorted(p for p in ckpts.iterdir() if p.is_dir() and p.name.startswith("ckpt-"))


def checkpoint_env_steps(ckpt: Path) -> int | None:
    """The env steps a checkpoint's `meta.json` records; None when it cannot be read."""
    try:
        meta = json.loads((ckpt / "meta.json").read_text())
        return int(meta["counters"]["env_steps"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def load_level_state(path: Path):
    """The level sampler saved at `path` (`spaces.LevelSource`: a `LevelSampler` or a `LevelBuffer`), from a
    checkpoint's `levels.msgpack` (the bare `state_dict()`) or the level service's snapshot (the state under
    "sampler"); None when the file cannot be read as either."""
    from levelray.contracts import snapshot
    from levelray.level_service.spaces import sampler_from_state

    try:
        state = snapshot.load(path)
        if isinstance(state, dict) and "format" in state and "sampler" in state:
            state = state["sampler"]
        return sampler_from_state(state)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def level_matrix(run: dict, kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, str] | None:
    """(env steps [R], level seeds [L], values [R, L], source) of `kind` in ("weights", "staleness"):
    from `level_<kind>` records, else from the checkpoints' level sampler states; None without data.

    None for a level-buffer run: its records' vectors are over the buffer's slots, whose seeds change at each
    eviction, so a column would not be one level (`level_buffer.png` draws such runs instead)."""
    if run.get("buffer"):
        return None
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
    from levelray.level_service.sampler import LevelSampler

    steps, values, seeds = [], [], None
    for ckpt in checkpoint_dirs(run):
        env_steps = checkpoint_env_steps(ckpt)
        if env_steps is None or not (ckpt / "levels.msgpack").exists():
            continue
        sampler = load_level_state(ckpt / "levels.msgpack")
        if not isinstance(sampler, LevelSampler):  # unreadable, or a buffer (see above)
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


def score_quantiles(records: list[dict]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(env steps [R], {quantile: values [R]}) of the records whose `level_score` has every finite
    `SCORE_QUANTILES` value (the scored levels' score distribution at each report); empty arrays without any."""
    steps: list[float] = []
    rows: list[list[float]] = []
    for rec in records:
        score = rec.get("level_score")
        if not isinstance(score, dict) or "env_steps" not in rec:
            continue
        row = [score.get(q) for q in SCORE_QUANTILES]
        if all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in row):
            steps.append(rec["env_steps"])
            rows.append([float(v) for v in row])
    values = np.asarray(rows, dtype=np.float64).reshape(len(rows), len(SCORE_QUANTILES))
    return np.asarray(steps, dtype=np.float64), {q: values[:, j] for j, q in enumerate(SCORE_QUANTILES)}


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

    for ckpt in reversed(checkpoint_dirs(run)):
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


def last_value(records: list[dict], key: str):
    for rec in reversed(records):
        v = rec.get(key)
        if v is not None:
            return v
    return None


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
    series = [s for s in (record_series(r["records"], key, x_key=x_key) for r in runs) if s[0].size >= 2]
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


def group_point(runs: list[dict], key: str, x_key: str = "env_steps") -> dict[str, Any] | None:
    """Where `group_curve` has no curve (runs of one report, or reports at one env step, as a sweep's short trials
    have): the mean of the runs' last values at the mean of their last x, with the 95% t half-width (None below
    two runs); None when no run has the series."""
    last = [(float(x[-1]), float(y[-1])) for x, y in (record_series(r["records"], key, x_key=x_key) for r in runs)
            if x.size]
    if not last:
        return None
    mean, half = mean_ci([y for _, y in last])
    return {"x": float(np.mean([x for x, _ in last])), "mean": mean, "half": None if math.isnan(half) else half,
            "runs": len(last)}


def final_values(runs: list[dict], key: str) -> dict[str, Any]:
    """Mean and 95% t-interval of the runs' last `key` (n: how many runs have one)."""
    return ci_summary([last_value(r["records"], key) for r in runs])

"""Helpers shared by the benchmark scripts: timing, the table printer and the JSON result file.

Run the scripts as modules from the repository root (`python -m benchmarks.bench_vtrace`): `benchmarks.common`
then imports as a package and `levelray` from the installed package, with no import-path edits.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from levelray.deploy.report.runs import read_records
from levelray.deploy.report.stats import paired_ci

# A table column: a key (also the header), (key, header), or (key, header, format) where `format` turns the
# cell's value into its text. For rows that are sequences the key is unused: cells are taken by position.
Column = str | tuple[str, str] | tuple[str, str, Callable[[Any], str]]


def calls_in(fn: Callable[[], object], seconds: float, *, warmup: int = 5) -> tuple[int, float]:
    """`(calls, elapsed seconds)` of calling `fn` for at least `seconds`, after `warmup` calls."""
    for _ in range(warmup):
        fn()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn()
        n += 1
    return n, time.perf_counter() - start


def time_call(fn: Callable[[], object], *, repeats: int = 5, min_time: float = 0.2) -> dict:
    """Median/min seconds per call over `repeats` rounds, each at least `min_time` long."""
    fn()  # warm-up
    per_call = []
    for _ in range(repeats):
        n, start = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_time:
                break
        per_call.append(elapsed / n)
    return {"median_s": statistics.median(per_call), "min_s": min(per_call), "max_s": max(per_call)}


def machine() -> dict:
    """What the benchmark ran on: Python, CPU architecture and count, OS, and torch (version, threads, GPU)
    when it can be imported."""
    info = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
    }
    try:
        import torch
    except ImportError:
        return info
    info["torch"] = torch.__version__
    info["torch_threads"] = torch.get_num_threads()
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def _cell(value: Any, fmt: Callable[[Any], str] | None) -> str:
    if fmt is not None:
        return fmt(value)
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.3f}"
    return str(value)


def _columns(rows: Sequence[Mapping | Sequence], columns: Sequence[Column] | None) -> list[tuple]:
    if columns is None:
        if not rows or not isinstance(rows[0], Mapping):
            raise ValueError("print_table needs `columns` unless the rows are dicts")
        columns = list(rows[0])
    out = []
    for c in columns:
        if isinstance(c, str):
            out.append((c, c, None))
        elif len(c) == 2:
            out.append((c[0], c[1], None))
        else:
            out.append(tuple(c))
    return out


def print_table(
    rows: Sequence[Mapping | Sequence], columns: Sequence[Column] | None = None, title: str | None = None
) -> None:
    """Print `rows` as a right-aligned text table: an optional title line, the headers, a dashed rule, the rows.

    rows: dicts (each column's cell is `row[key]`) or sequences (cells in column order). columns: see `Column`;
    None takes the first dict row's keys. Cells without a format: None is "-", floats "1,234.568", else str().
    """
    cols = _columns(rows, columns)
    cells = [[header for _, header, _ in cols]]
    for row in rows:
        values = [row.get(key) for key, _, _ in cols] if isinstance(row, Mapping) else list(row)
        if len(values) != len(cols):
            raise ValueError(f"row has {len(values)} cells for {len(cols)} columns: {row!r}")
        cells.append([_cell(v, fmt) for v, (_, _, fmt) in zip(values, cols, strict=True)])
    widths = [max(len(r[i]) for r in cells) for i in range(len(cols))]
    if title:
        print(title)
    for i, r in enumerate(cells):
        print("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))
        if i == 0:
            print("  ".join("-" * w for w in widths))


def write_json(path: str | os.PathLike, data: Mapping[str, Any], *, benchmark: str | None = None) -> Path:
    """Write indented JSON: `benchmark` (when given), `date` (local time), a `machine` block (see `machine()`),
    then the keys of `data`, which must not repeat those. Creates the folder, prints and returns the path.
    Values JSON cannot hold (numpy scalars, paths, ...) are written as their str()."""
    path = Path(path)
    payload: dict[str, Any] = {} if benchmark is None else {"benchmark": benchmark}
    payload |= {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine()}
    clash = payload.keys() & data.keys()
    if clash:
        raise ValueError(f"write_json adds {sorted(clash)} itself; rename those keys of `data`")
    payload |= data
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, default=str))
    print(f"wrote {path}")
    return path


# ------------------------------------------------------------------ comparison benchmarks (arms x seeds)
ROOT = Path(__file__).resolve().parents[1]
_VENV_LEVELRAY = ROOT / ".venv" / "bin" / "levelray"
LEVELRAY = [str(_VENV_LEVELRAY)] if _VENV_LEVELRAY.exists() else [sys.executable, "-m", "levelray.deploy.cli"]


def run_levelray(cmd: list[str], log: Path, env: Mapping[str, str] | None = None) -> str:
    """Run a `levelray` command (`[*LEVELRAY, ...]`) from the repo root; stdout+stderr go to `log`; returns
    stdout. A failure ends the benchmark with the command's last 30 lines."""
    start = time.time()
    print(f"$ levelray {' '.join(cmd[len(LEVELRAY):])}", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=None if env is None else dict(env))
    log.write_text(f"$ {' '.join(cmd)}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
        raise SystemExit(f"command failed (exit {proc.returncode}, log {log}):\n{tail}")
    print(f"  done in {time.time() - start:.0f} s: {log.name}", file=sys.stderr, flush=True)
    return proc.stdout


def paired(rows: Sequence[Mapping], a: str, b: str, key: str, sweep: Mapping[str, Any] | None = None,
           metric: str | None = None) -> dict:
    """`b - a` of `key` seed by seed (`rows`: dicts with `arm`, `seed` and `key`): {mean, ci95, n, seeds}, as
    `levelray.deploy.report.stats.paired_ci` gives it.

    With `sweep` (the results.json `run_sweep` returns) and `metric` (the sweep's name of the same per-seed number,
    e.g. `test.success_rate`), a comparison with the sweep's baseline is read from results.json, which holds it
    already (computed by the same `paired_ci`); another pair, or a number the sweep does not name (one the
    benchmark derives, or of trials not finished), is computed from `rows`."""
    entry = (sweep["paired"].get(b, {}).get(metric) if sweep is not None and metric is not None
             and a == sweep["baseline"] else None)
    if entry is None:
        return paired_ci(*({r["seed"]: r[key] for r in rows if r["arm"] == arm} for arm in (a, b)))

    def seeds(arm: str) -> set[int]:
        return {t["seed"] for t in sweep["trials"] if t["arm"] == arm and metric in t["metrics"]}

    return {"mean": entry["mean"], "ci95": entry["ci"], "n": entry["n"], "seeds": sorted(seeds(a) & seeds(b))}


def train_flags_config(flags: Sequence[str]) -> dict:
    """`levelray train` flags (`--level-buffer-size 500`) as the nested config mapping a sweep spec takes, each value
    of its config type (500, not "500")."""
    from levelray.contracts.config import from_dict, get_path
    from levelray.deploy.cli import build_parser

    parser, dests = build_parser()
    args = parser.parse_args(["train", *flags])
    out: dict = {}
    for dest, path in dests.items():
        if hasattr(args, dest):
            *sections, leaf = path.split(".")
            node = out
            for section in sections:
                node = node.setdefault(section, {})
            node[leaf] = getattr(args, dest)
    typed = from_dict(out)
    for dest, path in dests.items():
        if hasattr(args, dest):
            *sections, leaf = path.split(".")
            node = out
            for section in sections:
                node = node[section]
            node[leaf] = get_path(typed, path)
    return out


SWEEPS = ROOT / "benchmarks" / "sweeps"


def load_sweep(name: str) -> dict:
    """The spec mapping of benchmarks/sweeps/NAME.yaml (what a benchmark lays its flags over)."""
    import yaml

    return yaml.safe_load((SWEEPS / f"{name}.yaml").read_text())


def run_sweep(spec: Mapping[str, Any], out: Path, parallel: int) -> dict[str, Any]:
    """`levelray sweep` of `spec` (a spec mapping, see docs/guides/experiments.md) into `out`, `parallel` trials at
    once; a sweep of the same spec already in `out` is continued (`--resume`: its finished trials are kept), one of
    another spec ends the benchmark. Returns its results.json (`levelray.deploy.sweep.results`: the arms, the paired
    differences from the baseline, the trials), each trial with its run's `records` (metrics.jsonl) and
    `evaluation` (evaluate.json, where the spec has an unnamed evaluation) added; the trials are in the sweep's
    order (seed by seed, the arms interleaved). A trial that did not finish ends the benchmark."""
    import yaml

    from levelray.deploy.sweep.spec import load_spec

    out.mkdir(parents=True, exist_ok=True)
    if (out / "sweep.yaml").exists():
        if load_spec(out / "sweep.yaml") != load_spec(dict(spec), name=out.name):
            raise SystemExit(f"{out} holds a sweep of another spec ({out / 'sweep.yaml'}); give another --out-dir, or "
                             f"delete it to start this one")
        cmd = [*LEVELRAY, "sweep", "--resume", str(out)]
    else:
        path = out.parent / f"{out.name}.yaml"
        path.write_text(yaml.safe_dump(dict(spec), sort_keys=False))
        cmd = [*LEVELRAY, "sweep", str(path), "--dir", str(out), "--max-concurrent", str(parallel)]
    print(f"$ levelray {' '.join(cmd[len(LEVELRAY):])}", file=sys.stderr, flush=True)
    subprocess.run(cmd, cwd=ROOT)  # its progress lines go to the terminal
    results = json.loads((out / "results.json").read_text())  # the sweep writes it; it has no reader of its own
    bad = [f"{t['name']}: {t['status']} {t['error'] or ''}" for t in results["trials"] if t["status"] != "done"]
    if bad:
        raise SystemExit(f"sweep {out} did not finish: {'; '.join(bad)}; continue it by running the benchmark again")
    for trial in results["trials"]:
        run = Path(trial["run_dir"])
        trial["records"] = read_records(run)
        trial["evaluation"] = read_evaluation(trial) if (run / "evaluate.json").exists() else None
    return results


def read_evaluation(trial: Mapping[str, Any], name: str | None = None, budget: int | None = None) -> dict:
    """A sweep trial's `levelray evaluate --json`: of its evaluation `name` (None: the unnamed one) at an earlier
    `budget` of the spec's budgets (None: the run's end)."""
    from levelray.deploy.sweep.metrics import evaluation_file

    return json.loads((Path(trial["run_dir"]) / evaluation_file(name, budget)).read_text())


def budget_names(spec: Mapping[str, Any], budgets: Sequence[int]) -> list[tuple[int, int | None]]:
    """(budget, the earlier budget that names its metrics and evaluation files, or None) of each of `budgets`, the
    spec's budgets (or its one `total_steps` where it has none), as the sweep names them
    (`levelray.deploy.sweep.results.budget_tables`): the last budget's are the run's final ones, named as in a
    sweep without budgets."""
    from levelray.deploy.sweep.results import budget_tables

    return [(budget, earlier) for budget, (earlier, _) in zip(budgets, budget_tables(spec), strict=True)]


def metric_at(metric: str, earlier: int | None) -> str:
    """The sweep's name of `metric` at an `earlier` budget (None: the run's end): `test.return_mean@400000`
    (`levelray.deploy.sweep.metrics.at_budget`)."""
    from levelray.deploy.sweep.metrics import at_budget

    return next(iter(at_budget({metric: 0.0}, earlier)))


def records_until(records: list[dict], env_steps: float) -> list[dict]:
    """The metrics.jsonl records up to `env_steps` (a budget's last record, `training.env_steps@<budget>`)."""
    return [r for r in records if r.get("env_steps", 0) <= env_steps]


def pairwise(rows: Sequence[Mapping], arms: Sequence[str], key: str, sweep: Mapping[str, Any] | None = None,
             metric: str | None = None) -> dict[str, dict]:
    """`paired` of `key` for every pair of arms, later minus earlier: {"b-a": {mean, ci95, n, seeds}}."""
    return {f"{b}-{a}": paired(rows, a, b, key, sweep, metric) for i, a in enumerate(arms) for b in arms[i + 1:]}


def fmt_ci(stat: Mapping | None, spec: str = ".3f") -> str:
    """"mean ± half-width" of a `levelray.deploy.report.stats.ci_summary` ("-" when it has no values)."""
    if not stat or stat.get("mean") is None:
        return "-"
    half = "" if stat.get("ci95") is None else f" ± {format(stat['ci95'], spec)}"
    return f"{format(stat['mean'], spec)}{half}"


RETURN_WINDOW = 100  # episodes behind `episode_return_mean` once the run has finished that many


def steps_to_threshold(records: list[dict], threshold: float, *, held_out: bool = False) -> int | None:
    """First env steps in a run's `metrics.jsonl` records at which it reached `threshold` (None: never).

    By default, of the training return, the mean over the last 100 episodes: records before the 100th episode are
    skipped, since there the mean is over a few episodes and one lucky early one would count as reaching it. With
    `held_out`, of the success rate of the run's periodic held-out evaluation (`test_success_rate`, at the env steps
    that evaluation played at, `test_env_steps`): for protocols that judge generalisation, not training."""
    for r in records:
        if held_out:
            rate = r.get("test_success_rate")
            if rate is not None and rate >= threshold:
                return int(r.get("test_env_steps", r["env_steps"]))
            continue
        ret = r.get("episode_return_mean")
        if ret is not None and ret >= threshold and (r.get("episodes") or 0) >= RETURN_WINDOW:
            return int(r["env_steps"])
    return None

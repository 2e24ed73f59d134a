"""`levelray report SWEEP_DIR`: a sweep's trials on one page, its arms side by side.

The trials' run directories are reported as any runs are (`deploy.report.command.make_report`), grouped by arm:
return_bands.png draws each arm's mean train and held-out return with its 95% band over seeds, and the page and
summary.md carry the sweep's two tables from results.json (the arms, and each arm against the baseline seed by
seed). `--group-by KEY` groups by a config key instead. Any other RUN_DIR list is `deploy.report.command`'s.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from levelray.contracts.config import ConfigError
from levelray.deploy.report import command as report_command
from levelray.deploy.sweep.command import SPEC_FILE
from levelray.deploy.sweep.metrics import split_metric
from levelray.deploy.sweep.results import budget_tables, collect, fmt, table_metrics
from levelray.deploy.sweep.runner import RESULTS
from levelray.deploy.sweep.spec import load_spec
from levelray.deploy.sweep.trial import trial_dir

ARMS_NOTE = "Mean over the arm's seeds ± the half-width of the 95% Student-t interval (n: seeds)."
PAIRED_NOTE = "Per seed, the arm's value minus the baseline's; mean ± 95% Student-t half-width (n: seeds)."


def is_sweep_dir(path: str | Path) -> bool:
    return (Path(path) / SPEC_FILE).is_file()


def _cell(value: dict[str, Any] | None) -> str:
    return "n/a" if not value else f"{fmt(value)} (n={value['n']})"


def sweep_tables(results: dict[str, Any]) -> list[tuple[str, str, list[str], list[list[str]]]]:
    """(title, note, columns, cells) of the arms table and the paired table, at each budget."""
    tables = []
    for budget, at in budget_tables(results):
        metrics = table_metrics(results, budget)
        columns = ["arm", *(split_metric(m)[0] for m in metrics)]
        arms = [[arm, *(_cell(stats.get(m)) for m in metrics)] for arm, stats in results["arms"].items()]
        tables.append((f"Arms (baseline {results['baseline']}){at}", ARMS_NOTE, columns, arms))
        if results["paired"]:
            paired = [[arm, *(_cell(stats.get(m)) for m in metrics)] for arm, stats in results["paired"].items()]
            tables.append((f"Paired: arm - {results['baseline']}{at}", PAIRED_NOTE, columns, paired))
    return tables


def report_sweep(sweep_dir: str | Path, out: str | Path, group_by: str | None = None) -> dict[str, dict]:
    """Write the report of the sweep in `sweep_dir` into `out` (`make_report`'s figures dict)."""
    sweep_dir = Path(sweep_dir)
    spec = load_spec(sweep_dir / SPEC_FILE)
    path = sweep_dir / RESULTS
    results = json.loads(path.read_text()) if path.exists() else collect(spec, sweep_dir)
    arms = {arm: [d for seed in spec.seeds if (d := trial_dir(sweep_dir, arm, seed) / "metrics.jsonl").exists()]
            for arm in spec.arms}
    arms = {arm: [p.parent for p in paths] for arm, paths in arms.items() if paths}
    run_dirs = [d for paths in arms.values() for d in paths]
    if not run_dirs:
        raise ConfigError(f"report: the sweep in {sweep_dir} has no trial with metrics yet")
    return report_command.make_report(run_dirs, Path(out), group_by, arms=arms, tables=sweep_tables(results))


def cmd_report(args: argparse.Namespace) -> int:
    """`levelray report`: a sweep directory alone, or run directories (`deploy.report.command.cmd_report`)."""
    sweeps = [p for p in args.run_dirs if is_sweep_dir(p)]
    if not sweeps:
        return report_command.cmd_report(args)
    if len(args.run_dirs) > 1:
        raise ConfigError(f"report: {sweeps[0]} is a sweep directory; report it alone (its trials' run directories "
                          f"are under {Path(sweeps[0]) / 'trials'})")
    out = Path(args.out) if args.out else Path(sweeps[0]) / "report"
    report_command.show_figures(report_sweep(sweeps[0], out, args.group_by), out, as_json=args.json)
    return 0

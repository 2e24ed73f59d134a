"""A sweep on Weights & Biases (the spec's `wandb` key): one W&B run per trial, grouped by the sweep, and the
sweep's results once at the end.

Each trial's run logs itself, as `levelray train --wandb` does (`deploy.monitoring.wandb_run`): every record, its
videos, its level galleries and final checkpoint, with the arm and seed as config (`arm`, `seed`, `sweep`) and
tags (`<arm>`, `seed<N>`); its W&B run is its run directory's, so a trial that Tune restarts, or trains to its next
budget, continues the same W&B run, and the evaluations a trial plays after training go into that run's summary
(`test.return_mean`, ... as in results.json). When the sweep ends, one more W&B run in the group, job type
`sweep-results` (its id kept in `DIR/wandb/`, so a resumed sweep logs into it again), holds the tables of
results.json: `arms` and `paired` (one row per arm, metric and budget: mean, 95% half-width, n) and `trials`.

Ray Tune's own W&B integration (`ray.air.integrations.wandb`) logs, from the driver, what the trials report to
Tune: here a handful of progress keys (`deploy.sweep.trial.PROGRESS_KEYS`), so it would add a second, thinner run
per trial beside the one each trial logs itself; it is not used.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import yaml

from levelray.contracts import snapshot
from levelray.contracts.config import WandbConfig, from_dict
from levelray.deploy.monitoring.wandb_run import WandbRun, resolve_mode, run_config
from levelray.deploy.rundir import RunDir
from levelray.deploy.sweep.spec import SweepSpec

RESULTS_ID = "wandb/results-run-id"  # under the sweep directory


def announce(spec: SweepSpec) -> str:
    """The sweep's one line about W&B (the trials say nothing of their own)."""
    section = WandbConfig(**spec.wandb)
    mode, why = resolve_mode(section.mode)
    where = (f"{why or 'offline'}; in each trial's run directory (RUN_DIR/wandb/), upload with wandb sync"
             if mode == "offline" else mode)
    return f"W&B: one run per trial in project {section.project}, group {section.group or spec.name}, {where}"


def trial_extras(spec: SweepSpec, arm: str, seed: int):
    """A trial's `WandbExtras`: its arm, seed and sweep in its W&B config, its level galleries at its end, and no
    line of its own (the sweep says where the runs go); None when the spec has no `wandb`."""
    if spec.wandb is None:
        return None
    from levelray.deploy.report.wandb_images import level_galleries
    from levelray.deploy.training.driver import WandbExtras

    return WandbExtras(config={"sweep": spec.name, "arm": arm, "seed": seed}, images=level_galleries, quiet=True)


def log_evaluation(path: Path, metrics: dict[str, float], extras) -> None:
    """Add a trial's evaluation `metrics` to its W&B run's summary (the run its training logged, continued, with
    the config its run directory holds)."""
    run_dir = RunDir(path)
    cfg = from_dict(yaml.safe_load((run_dir.path / "config.yaml").read_text()))
    run = WandbRun.start(cfg.wandb, run_dir.path, run_dir.run_id, say=lambda _line: None,
                         config=run_config(cfg, run_dir.path, run_dir.run_id, extras.config))
    if run is not None:
        run.update_summary(metrics)
        run.finish()


def _results_id(sweep_dir: Path) -> str:
    path = sweep_dir / RESULTS_ID
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        snapshot.atomic_write_bytes(path, uuid.uuid4().hex.encode())
    return path.read_text().strip()


def results_tables(results: dict[str, Any]) -> dict[str, tuple[list[str], list[list[Any]]]]:
    """results.json as W&B tables, long form (a row per arm, metric): `arms`, `paired` (arm minus the baseline,
    seed by seed) and `trials` (a row per trial and metric; a trial without metrics has one row, its status)."""
    columns = ["arm", "metric", "mean", "ci95", "n"]
    tables = {}
    for key in ("arms", "paired"):
        rows = [[arm, metric, v["mean"], v["ci"], v["n"]] for arm, stats in results[key].items()
                for metric, v in stats.items()]
        tables[key] = (columns, rows)
    trial_rows = []
    for t in results["trials"]:
        metrics = t.get("metrics") or {None: None}
        trial_rows += [[t["name"], t["arm"], t["seed"], t["status"], t.get("error"), metric, value]
                       for metric, value in metrics.items()]
    tables["trials"] = (["trial", "arm", "seed", "status", "error", "metric", "value"], trial_rows)
    return tables


def log_results(spec: SweepSpec, sweep_dir: Path, results: dict[str, Any]) -> None:
    """The sweep's results (`results_tables`) in the group's `sweep-results` W&B run, W&B's files in DIR/wandb/."""
    section = WandbConfig(**{**spec.wandb, "enabled": True, "group": spec.wandb.get("group") or spec.name})
    config = {"sweep": spec.to_dict(), "complete": results.get("complete")}
    run = WandbRun.start(section, sweep_dir, _results_id(sweep_dir), config=config, name=f"{sweep_dir.name}-results",
                         job_type="sweep-results", say=lambda _line: None)
    if run is not None:
        run.log_tables(results_tables(results))
        run.finish()

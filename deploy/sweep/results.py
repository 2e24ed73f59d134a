"""A sweep's result, `DIR/results.json`, and its tables on the terminal.

    {"name", "baseline", "arms_order", "seeds", "budgets": the spec's (empty: one), "budget_unit": env_steps or
     trained_steps, "complete": every trial done,
     "arms":   {arm: {metric: {"mean": m, "ci": h, "n": seeds}}},
     "paired": {arm: {metric: {"mean": m, "ci": h, "n": seeds}}},   every arm but the baseline, minus the baseline
     "trials": [{"arm", "seed", "name", "run_dir", "status", "error", "starts", "metrics"}]}

`metric` is a finished trial's flat metric (`deploy.sweep.metrics`: `test.return_mean`, `maze-suite.success_rate`,
`training.env_steps`, `generated.maze-25.success_rate` of a named evaluation, `test.return_mean@400000` at an earlier
budget, ...). `h` is the half-width of the 95% Student-t interval of the mean
over the trials' seeds (`deploy.report.stats.mean_ci`; null with one seed); a paired entry is that of the per-seed
differences arm - baseline over the seeds where both have the metric. Only `done` trials count. A trial's status:
`done`, `failed` (its run refused its config or stopped: the error says why), `lost` (Tune gave up on it after
`max_failures` restarts: the error is Tune's) or `unfinished` (the sweep stopped before it ended; `--resume`).

Everything is read from the trials' own run directories (their evaluations through `trial.jsonl`), so the numbers
are those a user gets from `levelray evaluate` on each run directory, and `collect` can be run again on a sweep
directory at any time. The terminal's tables (and `levelray report`'s) are one pair per budget.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from levelray.deploy.report.stats import mean_ci, paired_ci
from levelray.deploy.sweep.metrics import split_metric
from levelray.deploy.sweep.spec import SweepSpec, trial_name
from levelray.deploy.sweep.trial import TrialLog, trial_dir


def stat(values: list[float]) -> dict[str, Any]:
    """{"mean", "ci" (95% t half-width, None below two values), "n"} of `values` (at least one)."""
    mean, half = mean_ci(values)
    return {"mean": mean, "ci": None if math.isnan(half) else half, "n": len(values)}


def _metric_order(trials: list[dict[str, Any]]) -> list[str]:
    """Every metric of the done trials: the evaluation's first (in the order a trial has them), training's last."""
    names: dict[str, None] = {}
    for t in trials:
        names.update(dict.fromkeys(t["metrics"]))
    return sorted(names, key=lambda m: (m.startswith("training."), list(names).index(m)))


def summarise(trials: list[dict[str, Any]], arms: list[str], baseline: str) -> dict[str, dict]:
    """`{"arms": ..., "paired": ...}` (the module doc) of trials `{arm, seed, status, metrics}`."""
    done = [t for t in trials if t["status"] == "done"]
    metrics = _metric_order(done)
    by = {(t["arm"], t["seed"]): t["metrics"] for t in done}
    out: dict[str, dict] = {"arms": {}, "paired": {}}
    for arm in arms:
        mine = [t for t in done if t["arm"] == arm]
        out["arms"][arm] = {m: stat(vs) for m in metrics
                            if (vs := [t["metrics"][m] for t in mine if m in t["metrics"]])}
        if arm == baseline:
            continue
        paired = {}
        for m in metrics:
            of = {side: {s: v[m] for (a, s), v in by.items() if a == side and m in v} for side in (baseline, arm)}
            diff = paired_ci(of[baseline], of[arm])
            if diff["n"]:
                paired[m] = {"mean": diff["mean"], "ci": diff["ci95"], "n": diff["n"]}
        out["paired"][arm] = paired
    return out


def trial_record(spec: SweepSpec, sweep_dir: Path, arm: str, seed: int, tune_error: str | None) -> dict[str, Any]:
    """One trial of results.json, from its run directory's `trial.jsonl` (and Tune's error, if Tune gave up)."""
    path = trial_dir(sweep_dir, arm, seed)
    log = TrialLog(path)
    outcome = log.outcome()
    starts = sum(e.get("event") == "start" for e in log.events())
    record = {"arm": arm, "seed": seed, "name": trial_name(arm, seed), "run_dir": str(path), "starts": starts,
              "status": "unfinished", "error": None, "metrics": {}}
    if outcome is not None and outcome["event"] == "done":
        record.update(status="done", metrics=outcome["metrics"])
    elif outcome is not None:
        record.update(status="failed", error=outcome.get("error"))
    elif tune_error is not None:
        record.update(status="lost", error=tune_error)
    return record


def collect(spec: SweepSpec, sweep_dir: str | Path, tune_errors: dict[str, str] | None = None) -> dict[str, Any]:
    """results.json of the sweep in `sweep_dir` (the module doc); `tune_errors`: trial name -> the error Tune ended
    it with."""
    errors = tune_errors or {}
    trials = [trial_record(spec, Path(sweep_dir), arm, seed, errors.get(trial_name(arm, seed)))
              for arm, seed in spec.trials()]
    arms = list(spec.arms)
    return {"name": spec.name, "baseline": spec.baseline, "arms_order": arms, "seeds": list(spec.seeds),
            "budgets": list(spec.budgets), "budget_unit": spec.budget_unit,
            "complete": all(t["status"] == "done" for t in trials),
            **summarise(trials, arms, spec.baseline),
            "trials": trials}


def fmt(value: dict[str, Any] | None) -> str:
    """"mean ± half-width" of a results.json entry ("-" without one)."""
    if not value:
        return "-"
    spec = ",.0f" if abs(value["mean"]) >= 1000 else ".3f"
    half = "" if value["ci"] is None else f" ± {format(value['ci'], spec)}"
    return f"{format(value['mean'], spec)}{half}"


def budget_tables(results: dict[str, Any]) -> list[tuple[int | None, str]]:
    """(earlier budget or None for the run's end, the words its tables' titles add) of each budget, in order."""
    budgets = results.get("budgets") or []
    unit = "trained steps" if results.get("budget_unit") == "trained_steps" else "env steps"
    tables = [(b if i < len(budgets) - 1 else None, f" at {b:,} {unit}") for i, b in enumerate(budgets)]
    return tables or [(None, "")]


def table_metrics(results: dict[str, Any], budget: int | None = None) -> list[str]:
    """The metrics the tables show at an earlier `budget` (None: the run's end): each level set's return_mean and
    success_rate (a maze suite by its mean, not maze by maze), the generalisation gap, and training's final return
    and env steps."""
    names: dict[str, None] = {}
    for stats in results["arms"].values():
        names.update(dict.fromkeys(m for m in stats if split_metric(m)[1] == budget))
    suite = _suite_members(results)
    parts = {m: split_metric(m)[0].split(".") for m in names}
    keep = [m for m in names if parts[m][-1] in ("return_mean", "success_rate") and parts[m][0] != "training"
            and not (len(parts[m]) > 1 and parts[m][-2] in suite)]
    gaps = [m for m in names if parts[m][-1] == "generalization_gap"]
    training = [m for key in ("episode_return_mean", "env_steps") for m in names if parts[m] == ["training", key]]
    return keep + gaps + training


def _suite_members(results: dict[str, Any]) -> set[str]:
    """The level sets that are mazes of the suite (their mean is `maze-suite.*`)."""
    from levelray.contracts.families import ENV_FAMILIES

    played = any(split_metric(m)[0].endswith("maze-suite.success_rate") for s in results["arms"].values() for m in s)
    return set(ENV_FAMILIES.load("maze").level.suite_names()) if played else set()


def _table(results: dict[str, Any], which: str, metrics: list[str], budget: int | None) -> list[str]:
    """The rows of `results[which]` ("arms" or "paired") in `metrics`, aligned; n: the most seeds of a metric."""
    rows = [["arm", "n", *(split_metric(m)[0] for m in metrics)]]
    for arm, stats in results[which].items():
        n = max((s["n"] for m, s in stats.items() if split_metric(m)[1] == budget), default=0)
        label = arm + (" (baseline)" if which == "arms" and arm == results["baseline"] else "")
        rows.append([label, str(n), *(fmt(stats.get(m)) for m in metrics)])
    return _aligned(rows)


def format_tables(results: dict[str, Any]) -> str:
    """At each budget, the arms table (mean ± 95% CI over seeds) and the paired table (arm - baseline, seed by
    seed), as text."""
    lines: list[str] = []
    for budget, at in budget_tables(results):
        metrics = table_metrics(results, budget)
        lines += ([""] if lines else []) + [f"sweep {results['name']}{at}: mean ± 95% CI (Student t over seeds; "
                                            f"n: seeds)"]
        lines += _table(results, "arms", metrics, budget)
        if results["paired"]:
            lines += ["", f"paired: arm - {results['baseline']}, seed by seed{at}"]
            lines += _table(results, "paired", metrics, budget)
    bad = [t for t in results["trials"] if t["status"] != "done"]
    if bad:
        lines += ["", "trials not done:"] + [f"  {t['name']}: {t['status']}" + (f": {t['error']}" if t["error"] else "")
                                             for t in bad]
    return "\n".join(lines)


def _aligned(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    out.insert(1, "  ".join("-" * w for w in widths))
    return out

"""A trial's metrics and the names they go by: what results.json averages and the tables show.

    <level set>.<key>                    an evaluation's result on one level set (`test.return_mean`)
    <name>.<level set>.<key>             the same of a named evaluation (`generated.maze-25.success_rate`)
    [<name>.]maze-suite.<key>            the suite's mean over its mazes; [<name>.]generalization_gap
    training.<key>                       from the run's metrics.jsonl (`training.env_steps`)
    <any of those>@<budget>              at an earlier budget of a spec with `budgets`; the last budget's carry none

An evaluation's `levelray evaluate --json` is kept in the trial's run directory as `evaluation_file(name, budget)`:
evaluate.json for the unnamed evaluation at the run's end, evaluate-<name>.json for a named one, and `@<budget>`
before `.json` at an earlier budget.
"""

from __future__ import annotations

import math
from typing import Any

EVAL_KEYS = ("return_mean", "return_median", "return_std", "success_rate", "length_mean", "human_normalized_score")


def evaluation_file(name: str | None = None, budget: int | None = None) -> str:
    """The file name (in the trial's run directory) of evaluation `name` at an earlier `budget` (None: the end)."""
    return f"evaluate{'' if name is None else '-' + name}{'' if budget is None else f'@{budget}'}.json"


def at_budget(metrics: dict[str, float], budget: int | None) -> dict[str, float]:
    """`metrics` named as at an earlier `budget` (None: unchanged, the run's end)."""
    return metrics if budget is None else {f"{m}@{budget}": v for m, v in metrics.items()}


def split_metric(metric: str) -> tuple[str, int | None]:
    """`test.return_mean@400000` -> ("test.return_mean", 400000); a metric of the run's end has budget None."""
    base, _, budget = metric.partition("@")
    return base, int(budget) if budget else None


def finite_number(value: Any) -> float | None:
    """`value` as a float when it is a finite number (not a bool); else None."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def evaluation_metrics(evaluation: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """`<prefix><level set>.<key>` of a `levelray evaluate --json` result (`EVAL_KEYS` that are numbers), the maze
    suite's mean (`maze-suite.success_rate`, `.return_mean`) and `generalization_gap` where it has them."""
    out: dict[str, float] = {}
    for name, result in evaluation["results"].items():
        out.update({f"{prefix}{name}.{key}": v for key in EVAL_KEYS
                    if (v := finite_number(result.get(key))) is not None})
    for key in ("success_rate", "return_mean"):
        if (v := finite_number(evaluation.get("maze_suite", {}).get(key))) is not None:
            out[f"{prefix}maze-suite.{key}"] = v
    if (gap := finite_number(evaluation.get("generalization_gap"))) is not None:
        out[f"{prefix}generalization_gap"] = gap
    return out


def training_metrics(records: list[dict[str, Any]]) -> dict[str, float]:
    """`training.*` from a run's metrics.jsonl records: env_steps, episode_return_mean (last 100 episodes) and
    test_return_mean (the last held-out evaluation during training) of the last record that has each,
    env_steps_per_second (the mean over reports), trained_fraction (samples trained / env steps: below 1 for
    Robust PLR)."""
    out: dict[str, float] = {}
    for key in ("env_steps", "episode_return_mean", "test_return_mean"):
        last = next((v for r in reversed(records) if (v := finite_number(r.get(key))) is not None), None)
        if last is not None:
            out[f"training.{key}"] = last
    rates = [v for r in records if (v := finite_number(r.get("env_steps_per_second"))) is not None and v > 0]
    if rates:
        out["training.env_steps_per_second"] = sum(rates) / len(rates)
    last = records[-1] if records else {}
    if finite_number(last.get("env_steps")) and finite_number(last.get("samples_trained")) is not None:
        out["training.trained_fraction"] = last["samples_trained"] / last["env_steps"]
    return out


def trial_metrics(evaluations: dict[str | None, dict[str, Any]], records: list[dict[str, Any]]) -> dict[str, float]:
    """A trial's metrics at one budget, flat: each evaluation's (`evaluations`: name or None -> its `levelray
    evaluate --json`) and training's from the records written so far."""
    out: dict[str, float] = {}
    for name, evaluation in evaluations.items():
        out.update(evaluation_metrics(evaluation, "" if name is None else f"{name}."))
    return out | training_metrics(records)

"""One trial of a sweep as Ray Tune runs it: a levelray run with its own run directory, then `levelray evaluate` of its
last checkpoint (with `budgets`: trained to each budget in turn, the same run resumed, and evaluated at each).

    DIR/trials/<arm>-seed<seed>/       the trial's run directory (config.yaml, metrics.jsonl, checkpoints/, ...)
        evaluate.json                  `levelray evaluate --json` of the final checkpoint (`deploy.sweep.metrics`
                                       names the files of named evaluations and earlier budgets)
        trial.jsonl                    one line per event: start (pid, node, the checkpoint it resumed from),
                                       budget (an earlier budget's metrics), done (the trial's metrics) or failed
                                       (the error)

`run_trial` is the Tune trainable. The run uses the inline backend in the trial's own process: the process is what
Tune places with the trial's resources, restarts when it or its node is lost, and stops; a Ray-backend job inside it
would start actors of its own outside the trial's resources. Each metrics record goes to `tune.report` (the progress
line); when the run has written a new levelray checkpoint (at most once a minute, and at each budget's end), the
report carries a `tune.Checkpoint` naming it (its `levelray.json` and the checkpoint's `meta.json`), which Tune
persists as the trial's checkpoint. The state itself
stays in the run directory, which is therefore on storage every node mounts at one path: a restarted trial continues
from the run directory's newest valid checkpoint (at least as new as the one Tune recorded), and one that Tune
restores with a checkpoint while its run directory holds none (a node that does not see the sweep directory) fails
saying so instead of silently starting over.

A trial whose run directory records an outcome (`done` or `failed`) reports it again and returns without training:
Tune saves its own state every few seconds, so a sweep stopped right after a trial finished may resume it as
unfinished, and it must not run twice. Likewise an earlier budget whose `budget` event is recorded is not trained or
evaluated again, and a run whose newest checkpoint already holds an earlier budget's env steps is evaluated without
training. A trial the run itself refuses (a config the env cannot take, a learner that diverged: `ConfigError`,
`JobFailed`) ends as failed with that error, not retried: the same config fails again.
Anything else (the process killed, the node lost) is Tune's to retry, up to the spec's `max_failures`.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from levelray.contracts import snapshot
from levelray.contracts.config import ConfigError, from_dict, replace_path
from levelray.contracts.counters import budget_reached
from levelray.deploy.errors import MAX_ERROR_CHARS, JobFailed
from levelray.deploy.rundir import CHECKPOINT_PREFIX, RunDir
from levelray.deploy.sweep.metrics import at_budget, evaluation_file, finite_number, trial_metrics
from levelray.deploy.sweep.spec import SweepSpec, trial_config, trial_name
from levelray.deploy.sweep.wandb_log import log_evaluation, trial_extras

TRIAL_LOG = "trial.jsonl"
POINTER = "levelray.json"  # what a Tune checkpoint of a trial holds, besides the levelray checkpoint's meta.json
CHECKPOINT_EVERY_S = 60.0
PROGRESS_KEYS = ("env_steps", "samples_trained", "episode_return_mean", "env_steps_per_second", "learner_version",
                 "test_return_mean")


class TrialStorageLost(RuntimeError):
    """Tune restored a trial from a checkpoint, but its run directory holds none."""


def trial_dir(sweep_dir: str | Path, arm: str, seed: int) -> Path:
    return Path(sweep_dir) / "trials" / trial_name(arm, seed)


class TrialLog:
    """`trial.jsonl`: the trial's starts and its outcome, one JSON object a line (a torn last line is skipped)."""

    def __init__(self, path: Path):
        self.path = Path(path) / TRIAL_LOG

    def events(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def add(self, event: str, **fields: Any) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps({"event": event, "time": time.time(), **fields}) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def outcome(self) -> dict[str, Any] | None:
        """The last `done` or `failed` event; None while the trial has not ended."""
        ends = [e for e in self.events() if e.get("event") in ("done", "failed")]
        return ends[-1] if ends else None

    def budgets(self) -> dict[int, dict[str, float]]:
        """Earlier budget -> its metrics, of the `budget` events (the budgets already trained to and evaluated)."""
        return {e["budget"]: e["metrics"] for e in self.events() if e.get("event") == "budget"}


class TuneReports:
    """`on_report` of a trial's run: each metrics record to `tune.report` (`PROGRESS_KEYS`), with a
    `tune.Checkpoint` naming the newest levelray checkpoint when there is a new one, at most every
    `CHECKPOINT_EVERY_S` with the records (a fast run checkpoints every few seconds, and Tune saves its whole
    experiment state each time; a restart takes the run directory's newest checkpoint anyway) and always with an
    explicit `report` (a budget's or the trial's end)."""

    def __init__(self, run_dir: RunDir):
        self.run_dir = run_dir
        self.reported: Path | None = None
        self.reported_at = -math.inf  # time.monotonic() of the last checkpoint handed to Tune

    def __call__(self, record: dict[str, Any]) -> None:
        due = time.monotonic() - self.reported_at >= CHECKPOINT_EVERY_S
        self.report({k: v for k in PROGRESS_KEYS if (v := finite_number(record.get(k))) is not None},
                    checkpoint=due)

    def report(self, metrics: dict[str, Any], checkpoint: bool = True) -> None:
        from ray import tune

        checkpoints = self.run_dir.list_checkpoints()
        latest = checkpoints[-1] if checkpoints else None
        if not checkpoint or latest is None or latest == self.reported:
            tune.report(metrics)
            return
        with tempfile.TemporaryDirectory(prefix="levelray-tune-") as tmp:
            pointer = {"run_dir": str(self.run_dir.path), "checkpoint": latest.name,
                       "version": int(latest.name.removeprefix(CHECKPOINT_PREFIX))}
            (Path(tmp) / POINTER).write_text(json.dumps(pointer))
            if (latest / "meta.json").exists():
                (Path(tmp) / "meta.json").write_bytes((latest / "meta.json").read_bytes())
            tune.report({**metrics, "levelray_checkpoint": pointer["version"]},
                        checkpoint=tune.Checkpoint.from_directory(tmp))  # Tune copies it to its storage here
        self.reported, self.reported_at = latest, time.monotonic()


def _restored_pointer(checkpoint) -> dict[str, Any] | None:
    if checkpoint is None:
        return None
    with checkpoint.as_directory() as d:
        path = Path(d) / POINTER
        return json.loads(path.read_text()) if path.exists() else {}


def _newest_counters(path: Path) -> dict[str, int]:
    """The counters of the run directory's newest checkpoint (empty: none)."""
    checkpoints = RunDir(path).list_checkpoints()
    if not checkpoints:
        return {}
    return json.loads((checkpoints[-1] / "meta.json").read_text()).get("counters", {})


def _start_run(spec: SweepSpec, arm: str, seed: int, path: Path, budget: int | None):
    """(config, claimed run directory, resumed) of the trial's run trained to `budget` (None: its config's
    total_steps): its newest checkpoint continued, else a new run (over whatever a process lost before its first
    checkpoint left)."""
    from levelray.deploy.training.driver import prepare_run_dir

    if RunDir(path).list_checkpoints():
        saved = replace_path(from_dict(yaml.safe_load((path / "config.yaml").read_text())), "run_dir", str(path))
        cfg = saved if budget is None else replace_path(saved, spec.budget_key, budget)
        return cfg, prepare_run_dir(cfg, resume=True, saved=saved), True
    cfg = trial_config(spec, arm, seed, path, budget)
    return cfg, prepare_run_dir(cfg, overwrite=True), False


def _train_to(spec: SweepSpec, arm: str, seed: int, path: Path, budget: int | None, reports: TuneReports) -> None:
    """Train the trial's run to `budget` (None: its config's total_steps), unless its newest checkpoint has.
    Raises JobFailed when the config's other budget (an env-step cap under budgets of trained steps) ends the run
    short of `budget`."""
    from levelray.deploy.training.driver import train

    if budget is not None and int(_newest_counters(path).get(spec.budget_counter, 0)) >= budget:
        return  # trained to it by an earlier start, which ended before its evaluation was recorded
    cfg, run_dir, resumed = _start_run(spec, arm, seed, path, budget)
    train(cfg, run_dir, resume=resumed, quiet=True, on_report=reports, wandb=trial_extras(spec, arm, seed))
    counters = _newest_counters(path)
    env_steps, trained = int(counters.get("env_steps", 0)), int(counters.get("samples_trained", 0))
    if budget is None or int(counters.get(spec.budget_counter, 0)) >= budget:
        return
    if budget_reached(cfg, env_steps, trained):  # the config's other budget ended it: it would again
        other = "total_steps" if env_steps >= cfg.total_steps else "total_trained_steps"
        raise JobFailed(f"the run reached {other} ({getattr(cfg, other):,}) at {env_steps:,} env steps, "
                        f"{trained:,} trained, short of its budget of {budget:,} {spec.budget_counter}; raise "
                        f"{other} in the spec")
    raise RuntimeError(f"the run stopped short of its budget of {budget:,} {spec.budget_counter} "
                       f"({env_steps:,} env steps, {trained:,} trained); Tune restarts it from its checkpoint")


def _evaluate(spec: SweepSpec, seed: int, path: Path, earlier: int | None) -> dict[str, float]:
    """Every evaluation of the spec on the run's newest checkpoint, each written to its file; the metrics, named
    as at the `earlier` budget (None: the run's end)."""
    from levelray.deploy.evaluation.evaluate import evaluate_checkpoint
    from levelray.deploy.report.runs import load_run

    evaluations = {}
    for e in spec.evaluations:
        evaluations[e.name] = evaluate_checkpoint(path, list(e.levels), episodes=e.episodes, greedy=e.greedy,
                                                  seed=seed, max_episode_steps=e.max_episode_steps)
        snapshot.atomic_write_bytes(path / evaluation_file(e.name, earlier), json.dumps(evaluations[e.name]).encode())
    return at_budget(trial_metrics(evaluations, load_run(path)["records"]), earlier)


def _train_and_evaluate(spec: SweepSpec, arm: str, seed: int, path: Path, log: TrialLog, restored) -> dict:
    import ray

    pointer = _restored_pointer(restored)
    checkpoints = RunDir(path).list_checkpoints()
    if pointer is not None and not checkpoints:
        raise TrialStorageLost(
            f"Tune restored this trial from its checkpoint {pointer.get('checkpoint')} of "
            f"{pointer.get('run_dir', path)}, but {path} holds no levelray checkpoint on this node: a sweep "
            f"directory must be storage that every node of the cluster mounts at one path")
    log.add("start", pid=os.getpid(), node=ray.util.get_node_ip_address(),
            resumed_from=checkpoints[-1].name if checkpoints else None)
    reports = TuneReports(RunDir(path))
    budgets, recorded = spec.budgets or (None,), log.budgets()
    metrics: dict[str, float] = {}
    for i, budget in enumerate(budgets):
        earlier = budget if i < len(budgets) - 1 else None
        if earlier is not None and earlier in recorded:
            metrics.update(recorded[earlier])
            continue
        _train_to(spec, arm, seed, path, budget, reports)
        reached = _evaluate(spec, seed, path, earlier)
        if spec.wandb is not None:  # into the W&B run the training logged
            log_evaluation(path, reached, trial_extras(spec, arm, seed))
        metrics.update(reached)
        if earlier is not None:
            log.add("budget", budget=earlier, metrics=reached)
            reports.report(reached)
    log.add("done", metrics=metrics)
    reports.report(metrics)
    return metrics


def run_trial(config: dict[str, Any], spec: SweepSpec, sweep_dir: str) -> None:
    """The Tune trainable of a sweep: `config` is the trial's `{arm, seed}` (see the module doc)."""
    import torch
    from ray import tune

    arm, seed = config["arm"], int(config["seed"])
    path = trial_dir(sweep_dir, arm, seed)
    path.mkdir(parents=True, exist_ok=True)
    log = TrialLog(path)
    outcome = log.outcome()
    if outcome is not None:
        tune.report(outcome.get("metrics") or {"trial_error": outcome.get("error")})
        return
    torch.set_num_threads(spec.threads())
    try:
        _train_and_evaluate(spec, arm, seed, path, log, tune.get_checkpoint())
    except (ConfigError, JobFailed, TrialStorageLost) as exc:
        error = f"{type(exc).__name__}: {exc}"
        if len(error) > MAX_ERROR_CHARS:  # an unknown env id's message lists every env there is
            error = error[:MAX_ERROR_CHARS - 1] + "…"
        log.add("failed", error=error)
        tune.report({"trial_error": error})

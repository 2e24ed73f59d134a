"""Running a sweep on Ray Tune: the trials as Tune trials, their progress lines, and the result at the end.

    DIR/sweep.yaml      the checked spec (what `--resume DIR` reads back)
    DIR/trials/         one levelray run directory per trial (`deploy.sweep.trial`)
    DIR/tune/           Tune's experiment: its state, each trial's reported results and checkpoints
    DIR/results.json    the arms and the paired differences (`deploy.sweep.results`)

The trials are a grid over `{seed, arm}` (`tune.grid_search`), each `deploy.sweep.trial.run_trial` with the spec's
resources (`tune.with_resources`: Tune starts a trial when the cluster has them free, and `--max-concurrent` caps
how many run at once). `FailureConfig(max_failures)` restarts a trial whose process or node was lost; the trial then
continues from its run directory's newest checkpoint. `--resume DIR` is `Tuner.restore` of DIR/tune with
`resume_unfinished` and `resume_errored`: finished trials are kept as they are, the others continue. The trials'
run directories and Tune's storage are both under DIR, which on a cluster of several machines is storage that every
node mounts at one path.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from ray import tune

from levelray.contracts import snapshot
from levelray.deploy.errors import error_summary
from levelray.deploy.sweep.results import collect, format_tables
from levelray.deploy.sweep.spec import SweepSpec, trial_config, trial_name
from levelray.deploy.sweep.trial import run_trial
from levelray.deploy.sweep.wandb_log import announce, log_results
from levelray.deploy.training.progress import budget_text

TUNE_DIR = "tune"
RESULTS = "results.json"
PROGRESS_EVERY_S = 30.0  # one line per running trial at most this often; starts, ends and restarts always


def say(text: str) -> None:
    print(f"levelray sweep: {text}", flush=True)


class Progress(tune.Callback):
    """A line per trial as it starts, while it trains (the counter its budget counts, env steps or samples
    trained, against that budget, with the share done and the time left at the current rate; return; env
    steps/s), and when it ends, fails or is restarted. Holds only the
    trials' budgets, so Tune can save it with the experiment."""

    counter = "env_steps"  # a class default: a sweep saved before budgets had units restores without one

    def __init__(self, budgets: dict[str, int], counter: str = "env_steps"):
        self.budgets = budgets
        self.counter = counter
        self.last: dict[str, float] = {}

    @staticmethod
    def _name(trial) -> str:
        return trial_name(trial.config["arm"], trial.config["seed"])

    def on_trial_start(self, trial, **info):  # Tune passes its hooks' arguments by name
        say(f"{self._name(trial)} started")

    def on_trial_result(self, trial, result, **info):
        name, now = self._name(trial), time.monotonic()
        if self.counter not in result or now - self.last.get(name, -PROGRESS_EVERY_S) < PROGRESS_EVERY_S:
            return
        self.last[name] = now
        ret, rate = result.get("episode_return_mean"), result.get("env_steps_per_second") or 0
        unit = "env steps" if self.counter == "env_steps" else "trained steps"
        done, budget = int(result[self.counter]), self.budgets.get(name, 0)
        # the counter's rate: env steps/s, times the share of them trained on so far for a budget of trained steps
        share = 1.0 if self.counter == "env_steps" else done / max(int(result.get("env_steps") or 0), 1)
        left = f" ({budget_text(done, budget, rate * share)})" if budget else ""
        say(f"{name} {done:,}/{budget:,} {unit}{left}, return "
            f"{'n/a' if ret is None else format(ret, '.3g')}" + (f", {rate:,.0f} steps/s" if rate > 0 else ""))

    def on_trial_complete(self, trial, **info):
        error = trial.last_result.get("trial_error")
        say(f"{self._name(trial)} {'failed: ' + error if error else 'done'}")

    def on_trial_recover(self, trial, **info):
        error = trial.get_pickled_error()
        say(f"{self._name(trial)} lost ({error_summary(error) if error else 'no error recorded'}); restarting it "
            f"from its last checkpoint")

    def on_trial_error(self, trial, **info):
        error = trial.get_pickled_error()
        say(f"{self._name(trial)} lost for good after {trial.num_failures} failures"
            + (f": {error_summary(error)}" if error else ""))


def trainable(spec: SweepSpec, sweep_dir: Path):
    """`run_trial` with the spec and the sweep directory bound, asking Ray for the spec's resources."""
    return tune.with_resources(tune.with_parameters(run_trial, spec=spec, sweep_dir=str(sweep_dir)),
                               dict(spec.resources))


def _tuner(spec: SweepSpec, sweep_dir: Path, max_concurrent: int | None) -> tune.Tuner:
    budgets = {trial_name(arm, seed): getattr(trial_config(spec, arm, seed, "trial"), spec.budget_key)
               for arm, seed in spec.trials()}
    return tune.Tuner(
        trainable(spec, sweep_dir),
        # seed outermost: Tune's grid varies the last key fastest, so the arms of one seed run side by side
        param_space={"seed": tune.grid_search(list(spec.seeds)), "arm": tune.grid_search(list(spec.arms))},
        tune_config=tune.TuneConfig(max_concurrent_trials=max_concurrent, reuse_actors=False),
        run_config=tune.RunConfig(
            name=TUNE_DIR, storage_path=str(sweep_dir), verbose=0, callbacks=[Progress(budgets, spec.budget_counter)],
            failure_config=tune.FailureConfig(max_failures=spec.max_failures),
            # every pointer kept (12 KB each, one a minute at most): Tune deletes old ones itself, and a sweep killed
            # between a deletion and Tune's next save of its state resumes naming a deleted one, which Tune reports
            # as an error at the trial's next checkpoint; the checkpoints themselves are the run directory's
            checkpoint_config=tune.CheckpointConfig(num_to_keep=None),
        ),
    )


def run_sweep(spec: SweepSpec, sweep_dir: str | Path, *, resume: bool = False,
              max_concurrent: int | None = None) -> dict[str, Any]:
    """Run (or with `resume` continue) the sweep in `sweep_dir` on the Ray this process is connected to; write and
    return results.json (`deploy.sweep.results`). The trials' errors are in it, not raised."""
    # Tune's own console output off (its table and banner): `Progress` prints a line per trial instead. Its
    # newer output engine prints a banner whatever the verbosity; the older one prints nothing at verbose=0.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    logging.getLogger("ray.tune").setLevel(logging.WARNING)  # and its INFO notes of each state it saved
    # and tensorboardX's note, per metric and result, that a budget's `@` is not allowed in its names
    logging.getLogger("tensorboardX").setLevel(logging.WARNING)
    sweep_dir = Path(sweep_dir).resolve()
    tune_dir = sweep_dir / TUNE_DIR
    if spec.wandb is not None:
        say(announce(spec))
    if resume and tune.Tuner.can_restore(str(tune_dir)):
        say(f"continuing {sweep_dir}")
        tuner = tune.Tuner.restore(str(tune_dir), trainable(spec, sweep_dir), resume_unfinished=True,
                                   resume_errored=True)
    else:  # a new sweep, or one stopped before Tune first saved its state: trials that ended are not run again
        tuner = _tuner(spec, sweep_dir, max_concurrent)
    grid = tuner.fit()
    errors = {trial_name(r.config["arm"], r.config["seed"]): error_summary(r.error)
              for r in grid if r.error is not None and r.config}
    results = collect(spec, sweep_dir, errors)
    snapshot.atomic_write_bytes(sweep_dir / RESULTS, json.dumps(results, indent=1).encode())
    if spec.wandb is not None:
        log_results(spec, sweep_dir, results)
    return results


def print_results(results: dict[str, Any], sweep_dir: Path) -> None:
    print(format_tables(results), flush=True)
    print(f"\nlevelray sweep: results in {sweep_dir / RESULTS}; figures: levelray report {sweep_dir}", flush=True)
    if not results["complete"]:
        unfinished = [t["name"] for t in results["trials"] if t["status"] in ("unfinished", "lost")]
        if unfinished:
            print(f"levelray sweep: {len(unfinished)} trial(s) did not finish; continue them with: levelray sweep "
                  f"--resume {sweep_dir}", file=sys.stderr, flush=True)

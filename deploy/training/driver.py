"""The training driver: one loop for every backend.

The loop reports, checkpoints, evaluates on held-out levels and decides when to stop; a backend only
moves training forward and answers questions about it. Two backends implement `Backend`:

- `deploy.training.inline.InlineBackend`: actors, learner and services in this process, stepped in turn;
- `deploy.training.ray_backend.RayJob`: Ray actors that train on their own while the driver watches.

Each pass of the loop: `advance` (the inline backend trains until the next report, checkpoint or
evaluation is due; Ray just waits), `poll` a snapshot, turn it into one `metrics.jsonl` record and hand it
to every sink (`deploy.training.reporting`), start or collect a held-out evaluation, write a checkpoint when
the learner version crossed a multiple of `checkpoint_interval_updates`, and stop on the step budget, on
stop-at-return, or when asked (Ctrl-C / SIGTERM). At the end the backend stops, a last record and a final checkpoint are
written.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from levelray.contracts.config import RunConfig, replace_path
from levelray.contracts.counters import budget_reached
from levelray.contracts.status import StatusSnapshot
from levelray.deploy.errors import JobFailed
from levelray.deploy.rundir import RunDir
from levelray.deploy.training.periodic_eval import PeriodicEvaluator
from levelray.deploy.training.progress import Budget, ProgressPrinter, reached_return, say
from levelray.deploy.training.reporting import (  # noqa: F401  (build_record, RecentFraction: imported from here)
    RecentFraction,
    Reporter,
    WandbExtras,
    build_record,
)
from levelray.learner.core import TrainingDiverged, monotone_counters

log = logging.getLogger(__name__)


class Backend(Protocol):
    """What the driver needs from a way of running the system."""

    uses_ray: bool  # held-out evaluation runs as Ray tasks (True) or in this process (False)

    def advance(self, until_time: float, until_version: int, stop: threading.Event) -> None:
        """Let training go on until `until_time` (time.time()), the learner reaching `until_version`,
        the step budget, or `stop`, whichever is first."""

    def poll(self) -> StatusSnapshot:
        """A snapshot of the job (`contracts.status.StatusSnapshot`): the learner's stats, and the fields
        of the backend's own parts (the supervisor, the services, restarts) where it has them."""

    def policy_weights(self) -> tuple[int, Any]:
        """`(version, weights)`: NumPy weights, or a Ray ObjectRef to them, for held-out evaluation."""

    def checkpoint_state(self) -> dict[str, Any]:
        """`{learner, counters, levels, replay}` taken between updates (levels/replay None when off)."""

    def publish(self, record: dict[str, Any]) -> None:
        """Hand the driver's latest record to whatever outside tools read the job through."""

    def stop(self) -> None:
        """Stop producing and consuming unrolls (before the final record and checkpoint)."""

    def close(self) -> None:
        """Release everything the backend holds."""


def check_health(snap: StatusSnapshot, run_dir: RunDir) -> None:
    """Raise JobFailed when the learner's training stopped or the env actors keep failing."""
    if snap["learner"].get("error"):
        raise JobFailed("learner failed: " + snap["learner"]["error"])
    if "supervisor" in snap and snap["supervisor"].get("error"):
        raise JobFailed(f"env actors keep failing, the job stops: {snap['supervisor']['error']}\n"
                        f"Fix the cause, then continue with: levelray train --resume {run_dir.path}")


def checkpoint_due(cfg: RunConfig, version: int, last_checkpoint_version: int) -> bool:
    """The learner crossed a multiple of the interval since the last checkpoint."""
    interval = cfg.checkpoint_interval_updates
    return version // interval > max(last_checkpoint_version, 0) // interval


def write_checkpoint(backend: Backend, run_dir: RunDir, cfg: RunConfig) -> int:
    """One atomic checkpoint of everything that is saved; returns its learner version."""
    state = backend.checkpoint_state()
    version = int(state["learner"]["version"])
    run_dir.save_checkpoint(version, state["learner"], state["counters"], level_state=state["levels"],
                            replay_state=state["replay"], config=cfg, keep=cfg.keep_checkpoints)
    return version


def write_final_checkpoint(backend: Backend, run_dir: RunDir, cfg: RunConfig) -> int:
    """`write_checkpoint` at the end of a run, saying where it is or, when it fails, which one to resume from."""
    try:
        version = write_checkpoint(backend, run_dir, cfg)
    except Exception as exc:
        latest = run_dir.list_checkpoints()
        say(f"levelray: could not write a final checkpoint ({type(exc).__name__}: {exc}); the latest "
            f"is {latest[-1] if latest else 'none'}; resume with: levelray train --resume {run_dir.path}")
        raise
    say(f"levelray: final checkpoint at version {version}")
    return version


def load_resume_state(run_dir: RunDir, device: str = "cpu") -> dict[str, Any]:
    """The latest checkpoint as the state a backend starts from (`learner` as `LearnerCore` loads it)."""
    ckpt = run_dir.load_latest_checkpoint(device)
    if ckpt is None:
        raise ValueError(f"--resume: no checkpoint in {run_dir.checkpoints}")
    print(f"levelray: resuming from {ckpt['path']} (version {ckpt['version']})", flush=True)
    # A run killed after its last checkpoint reported more than the checkpoint holds: count on from there.
    counters = monotone_counters(ckpt["counters"], run_dir.last_metrics_record())
    return {
        "learner": {"learner": ckpt["learner"], "counters": counters},
        "levels": ckpt["levels"],
        "replay": ckpt["replay"],
    }


def _next_due_version(cfg: RunConfig, version: int, evaluator: PeriodicEvaluator) -> int:
    """The next learner version at which the loop has something to do (checkpoint or evaluation)."""
    due = (version // cfg.checkpoint_interval_updates + 1) * cfg.checkpoint_interval_updates
    if evaluator.enabled:
        due = min(due, (version // evaluator.interval + 1) * evaluator.interval)
    return due


def threads_line(cfg: RunConfig, uses_ray: bool, threads: int) -> str:
    """The start-up line that says on how many threads the learner runs torch, and why (`policy.threads`)."""
    from levelray.learner.service import MAX_LEARNER_THREADS
    from levelray.policy.threads import torch_threads

    if cfg.num_threads:
        why = "num_threads"
    elif uses_ray:
        why = f"the Ray learner: its node's CPUs, at most {MAX_LEARNER_THREADS}"
    else:
        why = torch_threads(0)[1]
    return f"levelray: torch threads {threads} ({why})"


def _train(cfg: RunConfig, run_dir: RunDir, backend: Backend, evaluator: PeriodicEvaluator, reporter: Reporter,
           stop: threading.Event) -> dict[str, Any]:
    """The loop (see the module doc) until the budget, stop-at-return or `stop`; returns the last record."""
    record: dict[str, Any] = {}
    next_report = time.time() + cfg.report_interval_s
    start = backend.poll()["learner"]
    say(threads_line(cfg, backend.uses_ray, start["threads"]))
    version = start["learner_version"]
    last_checkpoint = version  # a resumed run starts from a checkpoint of this version
    reporter.throughput.update(start["env_steps"])  # the first report's rate counts from here
    reporter.replay_fraction.update(start["episodes"], start.get("episodes_replayed", 0))
    reporter.trained_fraction.update(start["env_steps"], start["learner_samples_with_gradient"])
    while not stop.is_set():
        try:
            backend.advance(next_report, _next_due_version(cfg, version, evaluator), stop)
        except TrainingDiverged as exc:  # the inline learner; on Ray it arrives as the learner's error
            raise JobFailed(str(exc)) from None
        snap = backend.poll()
        check_health(snap, run_dir)
        ls = snap["learner"]
        version = ls["learner_version"]
        if evaluator.due(version):  # inline: plays now; Ray: starts tasks and goes on
            weights_version, weights = backend.policy_weights()
            evaluator.maybe_start(weights_version, weights, env_steps=ls["env_steps"],
                                  trained_steps=ls["samples_trained"])
        finished = budget_reached(cfg, ls["env_steps"], ls["samples_trained"]) or reached_return(cfg, ls)
        if time.time() >= next_report or finished or evaluator.has_result:
            record = reporter.report(snap)
            next_report = time.time() + cfg.report_interval_s
        if checkpoint_due(cfg, version, last_checkpoint):
            last_checkpoint = write_checkpoint(backend, run_dir, cfg)
        if finished:
            break
    return record


def run(
    cfg: RunConfig,
    run_dir: RunDir,
    backend: Backend,
    *,
    stop: threading.Event | None = None,
    on_report: Callable[[dict], None] | None = None,
    metrics=None,
    wandb: WandbExtras | None = None,
) -> dict[str, Any]:
    """Drive `backend` until the budget, stop-at-return, or `stop`; returns the last metrics record."""
    evaluator = PeriodicEvaluator(cfg, use_ray=backend.uses_ray)
    reporter = Reporter(cfg, run_dir, backend, evaluator, metrics=metrics, on_report=on_report, wandb=wandb)
    record: dict[str, Any] = {}
    failed = True
    try:
        record = _train(cfg, run_dir, backend, evaluator, reporter, stop or threading.Event())
        failed = False
    finally:
        # The checkpoint first, then stopping: `ray job stop` (and Kubernetes) send SIGKILL a few seconds
        # after SIGTERM (RAY_JOB_STOP_WAIT_TIME_S, default 3 s), and waiting for actors can take longer.
        # On Ray the actors keep sending while it is written; the last updates after it are what a resume
        # loses, and the counters are monotone either way.
        try:
            try:
                write_final_checkpoint(backend, run_dir, cfg)
                reporter.final_checkpoint(run_dir.list_checkpoints()[-1])
            finally:
                backend.stop()
            record = reporter.report(backend.poll(), final=True)
        except BaseException:
            failed = True
            raise
        finally:
            evaluator.cancel()
            run_dir.close()
            reporter.close(failed=failed)
            backend.close()
    return record


def check_resume_overrides(saved: RunConfig, new: RunConfig) -> None:
    """Refuse, naming every key, a resume that changes a config value outside `contracts.config.RESUMABLE_KEYS`."""
    from levelray.contracts.config import RESUMABLE_KEYS, ConfigError, differing_paths, get_path

    changed = [f"{path} ({get_path(saved, path)!r} -> {get_path(new, path)!r})"
               for path in differing_paths(saved, new) if path not in RESUMABLE_KEYS]
    if changed:
        raise ConfigError(
            f"--resume cannot change {', '.join(changed)}: the checkpoint was trained with the saved value. "
            f"Keys that may change on resume: {', '.join(sorted(RESUMABLE_KEYS))}"
        )


def prepare_run_dir(
    cfg: RunConfig, *, resume: bool = False, overwrite: bool = False, saved: RunConfig | None = None
) -> RunDir:
    """Check the whole config (`contracts.validate`), that the env exists and that the metrics port can be
    served (`deploy.monitoring.metrics.check_metrics_port`), claim the run directory (see
    `RunDir.start`) and write the resolved config into it: the one place both the command line and
    `levelray.train` pass through before anything starts, whichever the backend. On resume, `saved` is the
    run's own config: overrides are checked against it, and the directory must hold a checkpoint, before
    anything is written."""
    from levelray.contracts.config import RESUMABLE_KEYS, ConfigError, leaves
    from levelray.contracts.validate import check_model_loss_actions, validate
    from levelray.deploy.rundir import default_run_dir

    if resume and saved is not None:
        check_resume_overrides(saved, cfg)
    # A resumed run keeps what its checkpoint was trained with: a problem only in such fields is a warning.
    fixed = {path for path, _f, _tp in leaves()} - RESUMABLE_KEYS if resume else ()
    for problem in validate(cfg, fixed=fixed):
        print(f"levelray: warning: {problem} (kept: the run being resumed was trained with it)", file=sys.stderr,
              flush=True)
    from levelray.actors.envs import env_spec  # after the checks: it imports the env libraries (~1 s)

    try:
        spec = env_spec(cfg.env)  # an unknown env id fails here, before anything starts
    except ValueError as exc:
        raise ConfigError(f"--env: {exc}") from None
    check_model_loss_actions(cfg.model_loss, spec, cfg.env.id)
    if cfg.levels.editor != "none":  # an editor that does not load, or edits another env family, is refused here
        from levelray.level_service.editors import check_editor

        check_editor(cfg.env, cfg.levels)
    from levelray.level_service.spaces import check_curriculum  # a curriculum or level score that does not load

    check_curriculum(cfg.levels, cfg.env)  # and what the curriculum needs of the run (SFL: a success signal)
    if cfg.learner.auxiliary_losses:  # a loss that does not import is refused here, not in the learner's process
        from levelray.learner.auxiliary import load_all

        load_all(cfg.learner.auxiliary_losses)
    if cfg.eval.video_interval > 0:  # an env that cannot draw frames is refused before the directory exists
        from levelray.deploy.evaluation.video import check_renders

        check_renders(cfg.env, "--video-interval")
    if cfg.wandb.enabled:  # the optional extra: refused naming it, before the directory is claimed
        from levelray.deploy.monitoring.wandb_run import require_wandb

        require_wandb()
    from levelray.deploy.monitoring.metrics import check_metrics_port
    from levelray.deploy.rundir import RunDirInUse

    if resume and not RunDir(cfg.run_dir).list_checkpoints():
        raise ConfigError(
            f"--resume: {cfg.run_dir} holds no checkpoint (the run stopped before its first one); "
            f"start it again with --overwrite"
        )
    # A port taken (say, by a run still going) is refused here, before the directory is claimed: a retry
    # with the same --run-dir then works. `train` binds it seconds later; losing that race is the same error.
    check_metrics_port(cfg.metrics_host, cfg.metrics_port)
    try:
        run_dir = RunDir.start(cfg.run_dir or default_run_dir(), resume=resume, overwrite=overwrite)
    except RunDirInUse as exc:
        raise ConfigError(str(exc)) from None
    run_dir.write_config(replace_path(cfg, "run_dir", str(run_dir.path)))
    return run_dir


def train(
    cfg: RunConfig,
    run_dir: RunDir,
    *,
    resume: bool = False,
    stop: threading.Event | None = None,
    quiet: bool = False,
    on_report: Callable[[dict], None] | None = None,
    wandb: WandbExtras | None = None,
) -> dict[str, Any]:
    """Build the backend `cfg.backend` names and run it; the metrics endpoint serves from the start.
    `cfg.run_dir` is taken from `run_dir` (the directory `prepare_run_dir` claimed). Each metrics record goes to
    `on_report` (a sweep's trial hands it to Ray Tune), else to the progress line unless `quiet`. `wandb`: what
    the caller adds to the run's W&B run where `cfg.wandb.enabled` (`WandbExtras`)."""
    from levelray.deploy.monitoring.metrics import MetricsServer
    from levelray.policy.threads import quiet_waits, use_threads

    cfg = replace_path(cfg, "run_dir", str(run_dir.path))
    quiet_waits()  # for the processes it starts (an embedded Ray's workers); this one has its OpenMP already
    use_threads(cfg.num_threads)  # the inline run trains here; a Ray run's learners size their own

    resume_state = load_resume_state(run_dir) if resume else None
    metrics = MetricsServer(cfg.metrics_host, cfg.metrics_port) if cfg.metrics_port else None
    if metrics is not None:
        print(f"levelray: metrics on http://{cfg.metrics_host}:{metrics.port}/metrics", flush=True)
    try:
        if cfg.backend == "inline":
            from levelray.deploy.training.inline import InlineBackend

            backend: Backend = InlineBackend(cfg, resume_state=resume_state)
        else:
            from levelray.deploy.training.ray_backend import RayJob

            backend = RayJob.start(cfg, run_dir, resume_state=resume_state)
        if on_report is None and not quiet:
            on_report = ProgressPrinter(budget=Budget(cfg.total_steps, cfg.total_trained_steps))
        return run(cfg, run_dir, backend, stop=stop, metrics=metrics, on_report=on_report, wandb=wandb)
    finally:
        if metrics is not None:
            metrics.close()



"""`levelray train` on Ray: the driver that starts the job, reports on it and stops it cleanly.

Without `--address` it starts an embedded local Ray; with one (`auto` or HOST:PORT) it joins that
cluster. It creates, in this order (data flows one way: actors -> learner -> services):

    level service (PLR)  <- scores ---------  learner (GPU if the cluster has one)
    replay service (PER) <- unrolls/prios --     ^ unrolls         | weights by version
    supervisor (named) -- owns --> env actors ---+  <--------------+ (object store)

then polls them every report interval: one `metrics.jsonl` record, the progress line, the
Prometheus snapshot, and a checkpoint every `checkpoint_interval_updates` versions. Ctrl-C (or
SIGTERM) stops the actors, then the learner, and writes a final checkpoint.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from typing import Any

import numpy as np
from levelray.contracts.config import RunConfig, to_dict
from levelray.deploy.components import level_seeds, replay_kwargs, sampler_kwargs
from levelray.deploy.progress import progress_line
from levelray.deploy.rundir import RunDir
from levelray.deploy.supervisor import NAMESPACE, SUPERVISOR_NAME, Supervisor

log = logging.getLogger(__name__)


def init_ray(address: str | None, num_actors: int, *, dashboard: bool = False) -> bool:
    """Connect to `address` or start a local Ray; returns True when this process started it."""
    import ray

    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if address:
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=False)
        return False
    cpus = max(os.cpu_count() or 1, num_actors + 1)
    ray.init(num_cpus=cpus, namespace=NAMESPACE, include_dashboard=dashboard, dashboard_host="127.0.0.1",
             log_to_driver=False)
    return True


class RayJob:
    """The running job's handles; `train_ray` drives it, tests drive it directly.

    Failure handling (see README, "Operations"): env actors are replaced by the supervisor; the level
    and replay services are Ray-restarted and come back from their last snapshot; a dead learner is
    restarted by `poll()` from the latest checkpoint (at most `max_learner_restarts` times).
    """

    def __init__(self, cfg: RunConfig, run_dir: RunDir, *, resume_state: dict | None = None,
                 record_seeds: bool = False):
        import ray
        from levelray.actors.envs import env_spec
        from levelray.level_service.service import LevelService
        from levelray.replay_service.service import ReplayService

        self.cfg = cfg
        self.run_dir = run_dir
        self.cfg_dict = to_dict(cfg)
        self.spec = env_spec(cfg.env)
        services = run_dir.path / "services"
        services.mkdir(parents=True, exist_ok=True)
        resume_state = resume_state or {}
        seeds = level_seeds(cfg.env)
        # Services and the supervisor live on the driver's node: their snapshots go to the run
        # directory, which is on this machine's disk. Env actors and the learner go anywhere.
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.driver_node = ray.get_runtime_context().get_node_id()
        here = NodeAffinitySchedulingStrategy(node_id=self.driver_node, soft=False)
        restart = dict(max_restarts=-1, max_task_retries=2, scheduling_strategy=here, enable_task_events=False)
        self.level_service = None
        if seeds is not None:
            self.level_service = LevelService.options(num_cpus=0, **restart).remote(
                seeds,
                {**sampler_kwargs(cfg.levels, cfg.learner.discount), "rng": cfg.seed},
                snapshot_path=str(services / "levels.msgpack"),
                snapshot_interval_s=max(cfg.levels.snapshot_interval_s, 1e-3),
                initial_state=resume_state.get("levels"),
            )
        self.replay_service = None
        if cfg.replay.replay_ratio > 0:
            self.replay_service = ReplayService.options(num_cpus=0, **restart).remote(
                cfg.replay.capacity, **replay_kwargs(cfg), snapshot_path=str(services / "replay.msgpack"),
                snapshot_interval_s=max(cfg.replay.snapshot_interval_s, 1e-3),
                initial_state=resume_state.get("replay"))
        self.learner_restarts = 0
        self.learner = self._start_learner(resume_state.get("learner_state"))
        try:
            ray.get_actor(SUPERVISOR_NAME, namespace=NAMESPACE)
            raise RuntimeError(
                f"another levelray job is running on this Ray cluster (actor {NAMESPACE}/{SUPERVISOR_NAME} "
                "exists); stop it first (Ctrl-C in its terminal) or use another cluster"
            )
        except ValueError:
            pass
        supervisor_cls = ray.remote(num_cpus=0, max_concurrency=16)(Supervisor)
        self.supervisor = supervisor_cls.options(name=SUPERVISOR_NAME, namespace=NAMESPACE,
                                                 scheduling_strategy=here).remote(
            self.cfg_dict, self.learner, self.level_service, seed=cfg.seed, record_seeds=record_seeds)
        ray.get(self.supervisor.scale.remote(cfg.actors.num_actors))
        self._last_steps: int | None = None
        self._last_time = time.time()
        self.steps_per_second = 0.0
        self.last_checkpoint_version = -1

    def _start_learner(self, learner_state: dict | None):
        import ray
        from levelray.learner.service import learner_actor_class

        gpus = 1 if ray.cluster_resources().get("GPU", 0) >= 1 else 0
        return learner_actor_class(gpus).remote(self.cfg_dict, self.spec.to_dict(), self.level_service,
                                                self.replay_service, learner_state)

    def restart_learner(self, cause: str) -> None:
        """Replace a dead learner by one restored from the latest checkpoint, and rebind the actors."""
        import ray

        if self.learner_restarts >= self.cfg.max_learner_restarts:
            raise RuntimeError(
                f"the learner died ({cause}) and was already restarted {self.learner_restarts} times; "
                f"the job stops here. Resume with: levelray train --resume {self.run_dir.path}"
            )
        ckpt = self.run_dir.load_latest_checkpoint()
        state = {"learner": ckpt["learner"], "counters": ckpt["counters"]} if ckpt is not None else None
        log.warning("learner died (%s); restarting it from %s", cause,
                    ckpt["path"] if ckpt is not None else "scratch (no checkpoint yet)")
        with contextlib.suppress(Exception):
            ray.kill(self.learner)
        self.learner = self._start_learner(state)
        self.learner_restarts += 1
        ray.get(self.supervisor.set_learner.remote(self.learner), timeout=120)
        self._last_steps = None

    def poll(self) -> dict[str, Any]:
        """One report: merged stats of every part of the job (restarting a dead learner first)."""
        import ray

        try:
            learner = ray.get(self.learner.stats.remote(), timeout=60)
        except ray.exceptions.RayActorError as exc:
            self.restart_learner(f"{type(exc).__name__}")
            learner = ray.get(self.learner.stats.remote(), timeout=120)
        refs = {"supervisor": self.supervisor.status.remote()}
        if self.level_service is not None:
            refs["levels"] = self.level_service.stats.remote()
        if self.replay_service is not None:
            refs["replay"] = self.replay_service.stats.remote()
        snap = {"learner": learner}
        for key, ref in refs.items():
            try:
                snap[key] = ray.get(ref, timeout=60)
            except ray.exceptions.RayError as exc:  # a service restarting: report without it this time
                log.warning("%s unavailable for this report: %s", key, type(exc).__name__)
        snap["learner_restarts"] = self.learner_restarts
        now = time.time()
        steps = learner["env_steps"]
        if self._last_steps is not None and now > self._last_time:
            self.steps_per_second = (steps - self._last_steps) / (now - self._last_time)
        self._last_steps, self._last_time = steps, now
        snap["env_steps_per_second"] = self.steps_per_second
        return snap

    def record(self, snap: dict) -> dict:
        """The `metrics.jsonl` record for a poll (JSON scalars only)."""
        ls, sup = snap["learner"], snap.get("supervisor", {})
        rec = {
            "time": time.time(),
            "env_steps": ls["env_steps"],
            "env_steps_per_second": snap["env_steps_per_second"],
            "episodes": ls["episodes"],
            "episode_return_mean": ls["episode_return_mean"],
            "learner_version": ls["learner_version"],
            "policy_lag_mean": ls["policy_lag_mean"],
            "queue_depth": ls["queue_depth"],
            "actors_alive": sup.get("actors_alive"),
            "actors_desired": sup.get("actors_desired"),
            "actor_restarts": sup.get("actor_restarts"),
            "learner_restarts": snap.get("learner_restarts", 0),
            "dropped": ls["dropped"],
        }
        rec.update({f"learner_{k}": v for k, v in ls["metrics"].items() if k != "version"})
        if "levels" in snap:
            lv = snap["levels"]
            rec["level_seen_fraction"] = lv["seen_fraction"]
            rec["level_score"] = lv.get("score")
            rec["level_top"] = lv.get("top_levels")
            rec["level_weights"] = np.round(np.asarray(lv["weights"], dtype=float), 6).tolist()
            if "staleness_vector" in lv:
                rec["level_staleness"] = np.asarray(lv["staleness_vector"]).tolist()
        if "replay" in snap:
            rp = snap["replay"]
            rec["replay"] = {k: rp[k] for k in ("size", "inserts", "samples", "mean_uses") if k in rp}
            rec["replay_priority_hist"] = rp.get("priority_hist")
        return rec

    def checkpoint(self) -> None:
        """Learner, counters, level and replay state in one atomic checkpoint; services snapshot too."""
        import ray

        state = ray.get(self.learner.state.remote(), timeout=120)
        level_state = replay_state = None
        if self.level_service is not None:
            level_state = ray.get(self.level_service.state_dict.remote(), timeout=120)
            ray.get(self.level_service.snapshot.remote(), timeout=120)
        if self.replay_service is not None:
            replay_state = ray.get(self.replay_service.state_dict.remote(), timeout=300)
            ray.get(self.replay_service.snapshot.remote(), timeout=300)
        version = int(state["learner"]["version"])
        self.run_dir.save_checkpoint(version, state["learner"], state["counters"], level_state=level_state,
                                     replay_state=replay_state, config=self.cfg, keep=self.cfg.keep_checkpoints)
        self.last_checkpoint_version = version

    def stop(self) -> None:
        import ray

        try:
            ray.get(self.supervisor.stop_all.remote(), timeout=60)
        finally:
            with contextlib.suppress(ray.exceptions.RayActorError):
                ray.get(self.learner.stop.remote(), timeout=60)

    def kill(self) -> None:
        import ray

        for handle in (self.supervisor, self.learner, self.level_service, self.replay_service):
            if handle is not None:
                ray.kill(handle, no_restart=True)
        # The supervisor's name is released asynchronously; wait so a next job can take it.
        deadline = time.time() + 15
        while time.time() < deadline:
            try:
                ray.get_actor(SUPERVISOR_NAME, namespace=NAMESPACE)
            except ValueError:
                break
            time.sleep(0.1)


def train_ray(cfg: RunConfig, run_dir: RunDir, *, resume: bool = False, stop: threading.Event | None = None,
              quiet: bool = False) -> dict:
    import ray
    from levelray.deploy.evaluate import PeriodicEvaluator, eval_workers
    from levelray.deploy.metrics import MetricsServer

    stop = stop or threading.Event()
    resume_state = None
    if resume:
        ckpt = run_dir.load_latest_checkpoint()
        if ckpt is None:
            raise ValueError(f"--resume: no checkpoint in {run_dir.checkpoints}")
        resume_state = {"learner_state": {"learner": ckpt["learner"], "counters": ckpt["counters"]},
                        "levels": ckpt["levels"], "replay": ckpt["replay"]}
        print(f"levelray: resuming from {ckpt['path']} (version {ckpt['version']})", flush=True)
    started = init_ray(cfg.address, cfg.actors.num_actors + eval_workers(cfg))
    metrics = MetricsServer(cfg.metrics_host, cfg.metrics_port) if cfg.metrics_port else None
    if metrics is not None:
        print(f"levelray: metrics on http://{cfg.metrics_host}:{metrics.port}/metrics", flush=True)
    job = RayJob(cfg, run_dir, resume_state=resume_state)
    evaluator = PeriodicEvaluator(cfg, use_ray=True)
    last_test: dict = {}
    record: dict = {}
    try:
        last_report = 0.0
        while not stop.is_set():
            stop.wait(min(0.25, cfg.report_interval_s))
            if time.time() - last_report < cfg.report_interval_s and not stop.is_set():
                continue
            last_report = time.time()
            snap = job.poll()
            if snap["learner"]["error"]:
                raise RuntimeError("learner failed:\n" + snap["learner"]["error"])
            record = job.record(snap)
            if evaluator.due(record["learner_version"]):  # held-out levels, in Ray tasks, not waited for
                version, (weights_ref,) = ray.get(job.learner.latest_weights.remote(), timeout=60)
                evaluator.maybe_start(version, weights_ref, env_steps=record["env_steps"])
            while (result := evaluator.poll()) is not None:
                record.update(result)
                last_test = result
            snap.update(last_test)
            run_dir.append_metrics(record)
            if metrics is not None:
                metrics.update(snap)
            if not quiet:
                print(progress_line(record), flush=True)
            version = record["learner_version"]
            if version // cfg.checkpoint_interval_updates > max(job.last_checkpoint_version, 0) // \
                    cfg.checkpoint_interval_updates:
                job.checkpoint()
            ret = record["episode_return_mean"]
            if record["env_steps"] >= cfg.total_steps or (
                cfg.stop_at_return is not None and ret is not None and ret >= cfg.stop_at_return
                and snap["learner"]["episode_returns_window"] >= 50
            ):
                break
    finally:
        try:
            job.stop()
            snap = job.poll()
            record = job.record(snap)
            run_dir.append_metrics(record)
            job.checkpoint()
            print(f"levelray: final checkpoint at version {job.last_checkpoint_version}", flush=True)
        except Exception as exc:
            latest = run_dir.list_checkpoints()
            print(f"levelray: could not write a final checkpoint ({type(exc).__name__}: {exc}); the latest is "
                  f"{latest[-1] if latest else 'none'}; resume with: levelray train --resume {run_dir.path}",
                  flush=True)
            raise
        finally:
            evaluator.cancel()
            run_dir.close()
            job.kill()
            if metrics is not None:
                metrics.close()
            if started:
                ray.shutdown()
    return record

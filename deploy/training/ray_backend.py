"""`levelray train` on Ray: the job's actors, and the backend the driver loop watches them through.

Without `--address` it starts an embedded local Ray; with one (`auto` or HOST:PORT) it joins that
cluster. It creates, in this order (data flows one way: actors -> level service, actors -> learner -> replay):

    level service (PLR)  <- episode results --------------------+
    replay service (PER) <- unrolls/prios --  learner (GPU if the cluster has one)
                                                 ^ unrolls         | weights by version
    supervisor (named) -- owns --> env actors ---+-----------------+ (object store)

The actors train on their own; `deploy.training.driver.run` polls them every report interval (records,
Prometheus, checkpoints, held-out evaluation, stop conditions) through the `Backend` methods here.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from levelray.actors.envs import env_spec
from levelray.contracts.config import ConfigError, RunConfig, uses_level_service, uses_replay
from levelray.contracts.status import StatusSnapshot, published
from levelray.contracts.validate import MIN_RAY_REPORT_INTERVAL_S, ray_resources
from levelray.deploy.cluster.ray_cluster import init_ray
from levelray.deploy.cluster.supervisor import NAMESPACE, SUPERVISOR_NAME, Supervisor
from levelray.deploy.evaluation.remote import eval_workers
from levelray.deploy.rundir import RunDir
from levelray.deploy.training.components import level_service_args, replay_service_args
from levelray.learner import service as learner_service
from levelray.learner.core import monotone_counters
from levelray.learner.ranks import merge_counters, merge_stats, rank_counters
from levelray.level_service.service import LevelService
from levelray.replay_service.service import ReplayService

log = logging.getLogger(__name__)

MIN_POLL_INTERVAL_S = MIN_RAY_REPORT_INTERVAL_S  # a shorter --report-interval is refused on this backend
LEARNER_START_TIMEOUT_S = 120  # several learners: the group forms within this, or the job fails with why


def check_cluster_device(cfg: RunConfig) -> None:
    """`--device cuda` needs a GPU in the cluster: the learner asks Ray for one only when the cluster has
    one, and without it would fail in its constructor, on every restart. (`contracts.validate` checked this
    machine's GPUs before Ray started; joining a cluster with `--address`, only Ray can tell.)"""
    if cfg.learner.device.startswith("cuda") and ray.cluster_resources().get("GPU", 0) < 1:
        where = f"the Ray cluster at {cfg.address}" if cfg.address else "the embedded Ray"
        raise ConfigError(f"learner.device = {cfg.learner.device!r}, but {where} has no GPU; use --device auto "
                          f"(a GPU when the cluster has one) or --device cpu")


def learner_gpus(cfg: RunConfig) -> float:
    """GPUs each learner asks for: `learner.num_gpus`, else one where the cluster has a GPU for every learner."""
    if cfg.learner.num_gpus is not None:
        return cfg.learner.num_gpus
    return 1.0 if ray.cluster_resources().get("GPU", 0) >= cfg.learner.num_learners else 0.0


def check_placement(cfg: RunConfig) -> None:
    """`learner.num_learners` learners ask for a CPU, `learner_gpus` GPUs and `learner.resources` each, the services
    for `service_resources`: a cluster with less of one of them in all could never place them, and the job would
    wait for them forever."""
    n, have = cfg.learner.num_learners, ray.cluster_resources()
    wanted = {"CPU": 1.0, "GPU": learner_gpus(cfg), **ray_resources(cfg.learner.resources)}
    where = f"the Ray cluster at {cfg.address}" if cfg.address else "the embedded Ray"
    for name, amount in wanted.items():
        if amount > 0 and n * amount > have.get(name, 0):
            raise ConfigError(f"learner.num_learners = {n} learners need {amount:g} {name} each, and {where} has "
                              f"{have.get(name, 0):g} {name} in all: use fewer learners (learner.num_learners), "
                              f"ask for less (learner.num_gpus, learner.resources), or add nodes")
    for name, amount in ray_resources(cfg.service_resources, "service_resources").items():
        if amount > have.get(name, 0):
            raise ConfigError(f"service_resources asks for {amount:g} {name} and {where} has {have.get(name, 0):g}: "
                              f"start nodes with that resource, or leave service_resources empty")


class RayJob:
    """The running job's handles and the Ray `Backend` (`driver.run` drives it; tests drive it directly).

    Failure handling (see README, "Operations"): env actors are replaced by the supervisor, with growing
    delays while they keep failing at start (past `actors.max_restarts` failures in a row the supervisor's
    `error` is in `poll()` and the driver stops the job); the level and replay services are Ray-restarted
    and come back from their last snapshot; a dead learner is restarted by `poll()` from the latest
    checkpoint (at most `max_learner_restarts` times).
    """

    uses_ray = True

    def __init__(self, cfg: RunConfig, run_dir: RunDir, *, resume_state: dict | None = None,
                 embedded: bool = False):
        """`embedded`: the Ray this job runs on was started by this process for it (`start()` without an
        address), on the user's own machine: env actors then ask for no CPU unless `--actor-cpus` says
        otherwise, so `levelray scale` is never refused for want of logical CPUs (see `deploy.cluster.supervisor`)."""
        self.cfg = cfg
        self.run_dir = run_dir
        self.spec = env_spec(cfg.env)
        services = run_dir.path / "services"
        services.mkdir(parents=True, exist_ok=True)
        resume_state = resume_state or {}
        # The supervisor lives on the driver's node, and so do the services unless `service_resources` place them:
        # their snapshots go to the run directory, on this machine's disk unless every node mounts it. Env actors
        # and the learner go anywhere.
        self.driver_node = ray.get_runtime_context().get_node_id()
        here = NodeAffinitySchedulingStrategy(node_id=self.driver_node, soft=False)
        placed = ray_resources(cfg.service_resources, "service_resources")
        where = dict(resources=placed) if placed else dict(scheduling_strategy=here)
        restart = dict(max_restarts=-1, max_task_retries=2, enable_task_events=False, **where)
        self.level_service = None
        if uses_level_service(cfg):
            self.level_service = LevelService.options(num_cpus=0, **restart).remote(**level_service_args(
                cfg, snapshot_path=str(services / "levels.msgpack"), initial_state=resume_state.get("levels")))
        self.replay_service = None
        if uses_replay(cfg):
            self.replay_service = ReplayService.options(num_cpus=0, **restart).remote(**replay_service_args(
                cfg, snapshot_path=str(services / "replay.msgpack"), initial_state=resume_state.get("replay")))
        self.learner_restarts = 0
        self.last_learner_stats: dict[str, Any] | None = None  # counters to restart a dead learner from
        self.learners = self._start_learners(resume_state.get("learner"))
        try:
            ray.get_actor(SUPERVISOR_NAME, namespace=NAMESPACE)
            raise RuntimeError(
                f"another levelray job is running on this Ray cluster (actor {NAMESPACE}/{SUPERVISOR_NAME} "
                "exists); stop it first (Ctrl-C in its terminal) or use another cluster"
            )
        except ValueError:
            pass
        self._actor_cpus = cfg.actors.num_cpus if cfg.actors.num_cpus is not None else (0.0 if embedded else 1.0)
        self._here = here
        self.supervisor_restarts = 0
        self._last_supervisor: dict[str, Any] = {"actors_desired": cfg.actors.num_actors, "actor_restarts": 0}
        self._actor_restarts_before = 0  # counted by supervisors that died: actor_restarts stays monotone
        self.supervisor = self._start_supervisor(cfg.actors.num_actors)
        self.started_ray = False  # set by start(): this job owns the embedded Ray and shuts it down

    @classmethod
    def start(cls, cfg: RunConfig, run_dir: RunDir, *, resume_state: dict | None = None) -> RayJob:
        """Join the cluster `cfg.address` names (or start the embedded Ray) and create the job."""
        # `init_ray` counts one learner; the others need a CPU each on the embedded Ray too
        started = init_ray(cfg.address, cfg.actors.num_actors + eval_workers(cfg) + cfg.learner.num_learners - 1)
        try:
            check_cluster_device(cfg)
            check_placement(cfg)
            job = cls(cfg, run_dir, resume_state=resume_state, embedded=started)
        except BaseException:
            if started:
                ray.shutdown()
            raise
        job.started_ray = started
        return job

    @property
    def learner(self):
        """Rank 0: the learner the driver asks for weights, stats and checkpoints."""
        return self.learners[0]

    def _start_learners(self, learner_state: dict | None) -> list:
        """`learner.num_learners` learner actors; several are made one process group before this returns (a
        rank that cannot be placed fails the job here, not in a hang)."""
        n = self.cfg.learner.num_learners
        cls = learner_service.learner_actor_class(learner_gpus(self.cfg), ray_resources(self.cfg.learner.resources))
        learners = [cls.remote(self.cfg, self.spec, self.replay_service,
                               _rank_state(learner_state, rank), rank=rank, world_size=n) for rank in range(n)]
        if n > 1:
            host, port = ray.get(learners[0].group_address.remote(), timeout=LEARNER_START_TIMEOUT_S)
            ray.get([learner.join_group.remote(host, port) for learner in learners], timeout=LEARNER_START_TIMEOUT_S)
        return learners

    def restart_learner(self, cause: str) -> None:
        """Replace a dead learner by one restored from the latest checkpoint, and rebind the actors."""
        if self.learner_restarts >= self.cfg.max_learner_restarts:
            raise RuntimeError(
                f"the learner died ({cause}) and was already restarted {self.learner_restarts} times; "
                f"the job stops here. Resume with: levelray train --resume {self.run_dir.path}"
            )
        ckpt = self.run_dir.load_latest_checkpoint()
        state = {"learner": ckpt["learner"] if ckpt is not None else None,
                 "counters": monotone_counters(ckpt["counters"] if ckpt is not None else None, self.last_learner_stats)}
        log.warning("learner died (%s); restarting %s from %s", cause,
                    "it" if len(self.learners) == 1 else f"all {len(self.learners)} learners",
                    ckpt["path"] if ckpt is not None else "scratch (no checkpoint yet)")
        for learner in self.learners:  # the others wait on the dead rank's all-reduce: the group restarts whole
            with contextlib.suppress(Exception):
                ray.kill(learner)
        self.learners = self._start_learners(state)
        self.learner_restarts += 1
        ray.get(self.supervisor.set_learner.remote(self.learners), timeout=120)

    def _start_supervisor(self, num_actors: int):
        supervisor_cls = ray.remote(num_cpus=0, max_concurrency=16)(Supervisor)
        supervisor = supervisor_cls.options(name=SUPERVISOR_NAME, namespace=NAMESPACE,
                                            scheduling_strategy=self._here).remote(
            self.cfg, self.learners, self.level_service, seed=self.cfg.seed, actor_cpus=self._actor_cpus)
        ray.get(supervisor.scale.remote(num_actors), timeout=120)
        return supervisor

    def restart_supervisor(self, cause: str) -> None:
        """A dead supervisor took its env actors with it (Ray kills the actors an actor owns) and the job
        would stall with no one to replace them: start a new one with the last known actor count. Its name
        is free once the old one is dead."""
        log.warning("supervisor died (%s); starting a new one with %d env actors", cause,
                    self._last_supervisor["actors_desired"])
        self._actor_restarts_before += int(self._last_supervisor.get("actor_restarts") or 0)
        with contextlib.suppress(Exception):
            ray.kill(self.supervisor, no_restart=True)
        _wait_for_supervisor_name(timeout_s=30)
        self.supervisor = self._start_supervisor(int(self._last_supervisor["actors_desired"]))
        self.supervisor_restarts += 1

    def _ask_learner(self, method: str, timeout: float, every_rank: bool = False):
        """Call the learner (every rank's, a list, with `every_rank`) and wait; a dead learner is restarted first
        (from the latest checkpoint) and asked again. Every driver call goes through here: the learner can die
        during any of them (a checkpoint being written included), and that must cost the job a restart, not
        end it."""
        def ask():
            handles = self.learners if every_rank else [self.learner]
            answers = ray.get([getattr(h, method).remote() for h in handles], timeout=timeout)
            return answers if every_rank else answers[0]

        try:
            return ask()
        except ray.exceptions.RayActorError as exc:
            self.restart_learner(f"{type(exc).__name__} during {method}()")
            timeout = max(timeout, 120)
            return ask()

    # -- Backend -------------------------------------------------------------------------------
    def advance(self, until_time: float, until_version: int, stop: threading.Event) -> None:
        """The actors train on their own: wait for the next report (or `stop`); polling the actors more
        often than every `MIN_POLL_INTERVAL_S` would only load them."""
        stop.wait(max(MIN_POLL_INTERVAL_S, until_time - time.time()))

    def poll(self) -> StatusSnapshot:
        """One report: merged stats of every part of the job (restarting a dead learner first)."""
        ranks = self._ask_learner("stats", timeout=60, every_rank=True)
        learner = ranks[0] if len(ranks) == 1 else merge_stats(ranks)
        self.last_learner_stats = learner
        refs = {"supervisor": self.supervisor.status.remote()}
        if self.level_service is not None:
            refs["levels"] = self.level_service.stats.remote()
        if self.replay_service is not None:
            refs["replay"] = self.replay_service.stats.remote()
        snap = {"learner": learner}
        for key, ref in refs.items():
            try:
                snap[key] = ray.get(ref, timeout=60)
            except ray.exceptions.RayActorError as exc:
                if key != "supervisor":  # a service restarting (Ray does it): report without it this time
                    log.warning("%s unavailable for this report: %s", key, type(exc).__name__)
                    continue
                self.restart_supervisor(type(exc).__name__)
                snap[key] = ray.get(self.supervisor.status.remote(), timeout=60)
            except ray.exceptions.RayError as exc:
                log.warning("%s unavailable for this report: %s", key, type(exc).__name__)
        if "supervisor" in snap:
            self._last_supervisor = dict(snap["supervisor"])
            snap["supervisor"]["actor_restarts"] = (int(snap["supervisor"].get("actor_restarts") or 0)
                                                    + self._actor_restarts_before)
        snap["learner_restarts"] = self.learner_restarts
        snap["supervisor_restarts"] = self.supervisor_restarts
        return snap

    def publish(self, record: dict[str, Any]) -> None:
        """`levelray status` reads the job through the supervisor: give it the driver's rate (not waited for)."""
        self.supervisor.set_progress.remote(published(record))

    def policy_weights(self) -> tuple[int, Any]:
        version, (weights_ref,) = self._ask_learner("latest_weights", timeout=60)
        return version, weights_ref

    def checkpoint_state(self) -> dict[str, Any]:
        """Learner state and counters, level and replay state; the services also write their snapshots."""
        states = self._ask_learner("state", timeout=120, every_rank=True)
        state = states[0]
        if len(states) > 1:  # one model (rank 0's), the counters of every rank
            state["counters"] = merge_counters([s["counters"] for s in states])
        state["levels"] = state["replay"] = None
        if self.level_service is not None:
            state["levels"] = ray.get(self.level_service.state_dict.remote(), timeout=120)
            ray.get(self.level_service.snapshot.remote(), timeout=120)
        if self.replay_service is not None:
            state["replay"] = ray.get(self.replay_service.state_dict.remote(), timeout=300)
            ray.get(self.replay_service.snapshot.remote(), timeout=300)
        return state

    def stop(self) -> None:
        """The learner first. At the budget the actors already idle (a receipt told them), but a run stopped before
        it (stop-at-return, Ctrl-C) may have actors whose `submit_batch` waits on the learner's full queue until it
        stops: stopping the actors first would make `stop_all` wait out its 10 s grace for run loops that cannot
        return."""
        try:
            with contextlib.suppress(ray.exceptions.RayActorError):
                ray.get([learner.stop.remote() for learner in self.learners], timeout=60)
        finally:
            with contextlib.suppress(ray.exceptions.RayActorError):  # a dead supervisor's actors died with it
                ray.get(self.supervisor.stop_all.remote(), timeout=60)

    def close(self) -> None:
        """Kill the job's actors; shut the embedded Ray down if this job started it."""
        self.kill()
        if self.started_ray:
            ray.shutdown()

    def kill(self) -> None:
        for handle in (self.supervisor, *self.learners, self.level_service, self.replay_service):
            if handle is not None:
                ray.kill(handle, no_restart=True)
        _wait_for_supervisor_name(timeout_s=15)  # so that a next job can take it


def _rank_state(state: dict | None, rank: int) -> dict | None:
    """What learner `rank` starts from: the checkpoint's model for every rank, the job's counters split
    (`ranks.rank_counters`)."""
    if state is None or rank == 0:
        return state
    return {**state, "counters": rank_counters(state.get("counters"), rank)}


def _wait_for_supervisor_name(timeout_s: float) -> None:
    """Ray releases a dead or killed actor's name asynchronously: wait (at most `timeout_s`) until the
    supervisor's name is free to be taken again."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            ray.get_actor(SUPERVISOR_NAME, namespace=NAMESPACE)
        except ValueError:
            return
        time.sleep(0.1)

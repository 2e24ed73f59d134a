"""The learner on Ray: a bounded inbound queue of unrolls, a training thread, weights by version.

`LearnerService` is a plain thread-safe class; `LearnerActor` is its Ray shell (a threaded actor, so
`submit_batch` calls from many env actors block on the queue while the training thread drains it).

- `submit_batch(unrolls, tally)` validates each unroll (a malformed one is rejected with the field named
  and counted; nothing else changes), then waits for room in the queue: a slow learner makes actors
  wait (backpressure) and memory stays bounded. It returns a receipt (`contracts.trajectory.Receipt`: the version,
  `[weights_ref]`, whether the budget is spent). `tally`: the env steps and episodes of unrolls the actor kept
  (`contracts.trajectory.StepTally`, counted at once; a malformed one is refused the same way).
- the training thread takes `batch_size - replayed` fresh unrolls (`LearnerCore.accept` drops those
  older than `max_policy_lag` versions), trains, and publishes the new weights once with `ray.put`
  (one object per version, shared by every actor).
- the update itself is `LearnerCore.train`, the same call the inline backend makes; the replay service is
  reached through `RemoteReplay` (fire-and-forget writes). The learner never talks to the level service: the
  actors score their episodes and tell it themselves (`actors.episode_scorer`).

The budget. The learner is where both budgets are counted (env steps received, samples trained: `LearnerCore`), so
it is the one part that knows the moment either is spent, and it enforces it where the data comes in: from then on
it receives nothing (a submit's unrolls and tally are refused, uncounted, and the queue is no longer taken from),
trains the batch it had begun as it stands, and says `budget_spent` in every receipt. Each actor learns it from
the answer to the call it makes anyway, and stops: no call back into the driver, no extra round trip, and an
actor added by `levelray scale` or restarted by the supervisor learns it at its first submit. The run's env steps
are then the learner's own count, each counted once, past `total_steps` by less than the one arrival that reached
it (an actor steps at most two submits more, which are never counted), whatever the env's speed; a resumed learner
counts on from its checkpoint's counters, so a resumed run goes on to the same budget. Before, only the
driver's poll stopped a run where nothing was trained (a Robust PLR buffer's warm-up sends only tallies): a maze run
of `--total-steps 20000` ended at 65,760 env steps. The alternatives do not hold at that speed or at all: the
supervisor stopping the actors knows the count only as often as it polls the learner; a share of the budget given
to each actor at its start ends the run early on a slow actor or loses a dead one's, cannot follow `levelray
scale`, and cannot divide a trained-steps budget, whose pace depends on what the level service replays.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import traceback

from levelray.contracts.config import LearnerConfig, RunConfig
from levelray.contracts.levels import training_range
from levelray.contracts.spec import EnvSpec
from levelray.contracts.trajectory import Receipt, StepTally, TrajectoryError, Unroll, validate_unroll
from levelray.learner.core import LearnerCore, TrainingDiverged
from levelray.policy.threads import affinity_cpus, use_threads, wait_policy_env

log = logging.getLogger(__name__)


class PendingWrites:
    """Fire-and-forget calls to a service whose failures are still counted: the learner never waits for a
    write, but each reply is collected (without blocking) before the next call, and a refused or lost one
    is counted by kind and logged. Thread-safe: writes are added by the training or sending thread while the
    driver's `stats` call collects them."""

    def __init__(self, what: str):
        import ray

        self._ray, self.what = ray, what
        self._pending: list[tuple[str, object]] = []
        self.failures: dict[str, int] = {}
        self._lock = threading.Lock()

    def add(self, kind: str, ref) -> None:
        self.collect()
        with self._lock:
            self._pending.append((kind, ref))

    def collect(self) -> None:
        with self._lock:
            if not self._pending:
                return
            refs = [ref for _, ref in self._pending]
            done, _ = self._ray.wait(refs, num_returns=len(refs), timeout=0)
            done_set = set(done)
            still = []
            for kind, ref in self._pending:
                if ref not in done_set:
                    still.append((kind, ref))
                    continue
                try:
                    self._ray.get(ref)
                except self._ray.exceptions.RayError as exc:
                    self.failures[kind] = self.failures.get(kind, 0) + 1
                    log.warning("%s %s failed: %s", self.what, kind, str(exc).strip().splitlines()[-1][:300])
            self._pending = still


class RemoteReplay:
    """`ReplayClient` over the replay service's Ray actor: `sample` waits, writes do not.

    While the replay service restarts (it comes back from its snapshot), `sample` returns None and
    the learner trains on fresh unrolls only; the failures are counted, and so are inserts and priority
    updates that the service refused or lost (`write_failures`)."""

    def __init__(self, handle):
        import ray

        self._ray, self.handle = ray, handle
        self.failures = 0
        self.writes = PendingWrites("replay")

    @property
    def write_failures(self) -> dict[str, int]:
        self.writes.collect()
        return dict(self.writes.failures)

    def sample(self, batch_size, beta):
        try:
            return self._ray.get(self.handle.sample.remote(batch_size, beta), timeout=60)
        except (self._ray.exceptions.RayActorError, self._ray.exceptions.GetTimeoutError,
                self._ray.exceptions.ActorUnavailableError) as exc:
            self.failures += 1
            log.warning("replay service unavailable (%s); training on fresh unrolls only", type(exc).__name__)
            return None

    def insert(self, items, priorities=None):
        self.writes.add("insert", self.handle.insert.remote(items, priorities))

    def update_priorities(self, ids, priorities):
        self.writes.add("update_priorities", self.handle.update_priorities.remote(ids, priorities))


# The learner's torch threads: every core of its machine, up to 4. Ray starts the actor with OMP_NUM_THREADS set
# to its 1 reserved CPU, which would leave torch one thread. Measured on the 2-core machine, README's main job (2
# env actors of 1 thread each, learner-bound) ran at 708 and 737 env steps/s with the learner on 1 thread, 1,071,
# 1,106 and 1,104 with 2 (RESULTS: "bf16"): the actors wait on the learner, so its second thread takes
# time they would not use. The cap of 4 keeps a learner on a large shared node from crowding its co-located
# actors (not measured here). The actors keep 1 thread each (`EnvActor`): with 2 each the same job lost 7%.
# `num_threads` (`--num-threads`) overrides it; the actor's idle OpenMP threads sleep (`wait_policy_env`), so
# the second thread takes no core from the actors while the learner waits for a batch.
MAX_LEARNER_THREADS = 4


def learner_threads() -> int:
    """Torch threads for the learner actor: the cores this process may run on (all the machine's where the OS
    has no affinity call, as macOS), at most `MAX_LEARNER_THREADS`."""
    return max(1, min(affinity_cpus(), MAX_LEARNER_THREADS))


def inbound_queue_size(learner: LearnerConfig, batch_unrolls: int) -> int:
    """Unrolls the learner's inbound queue holds: `learner.queue_size`, or one batch of `batch_unrolls` fresh
    unrolls. A full queue blocks the actors' `submit_batch` (backpressure). Every batch waiting in it adds one
    version to the policy lag of the unrolls behind it. One batch ready while the learner trains on another kept
    README's main job at a lag of 3 versions (16 with 32 unrolls) for 3% of its env steps/s (measured:
    benchmarks/RESULTS.md, "bf16")."""
    return learner.queue_size if learner.queue_size is not None else batch_unrolls


class LearnerService:
    """`cfg` and `spec` are the job's `RunConfig` and `EnvSpec` objects (Ray pickles the frozen dataclasses);
    `replay_service` is an actor handle (None: that service is off).

    One of `world_size` learners (`learner.num_learners`) as `rank`: with more than one, training starts once
    the driver has made them a process group (`group_address` on rank 0, then `join_group` on every rank):
    each rank trains on the unrolls its own actors send it, and `DataParallel` keeps the model one."""

    def __init__(self, cfg: RunConfig, spec: EnvSpec, replay_service=None,
                 resume_state: dict | None = None, *, rank: int = 0, world_size: int = 1):
        import ray

        self._ray = ray
        self.cfg = cfg
        self.spec = spec
        use_threads(cfg.num_threads or learner_threads())
        self.replay = RemoteReplay(replay_service) if replay_service is not None else None
        self.core = LearnerCore(self.cfg, self.spec, replay=self.replay)
        self.level_range = training_range(self.cfg.env)
        self.queue: queue.Queue = queue.Queue(maxsize=inbound_queue_size(self.cfg.learner, self.core.num_fresh))
        self.publish_lock = threading.Lock()  # the published weights
        self.update_lock = threading.Lock()  # the model and optimiser, held for a whole update
        self.error: str | None = None
        if resume_state is not None:
            self.core.load_state_dict(resume_state)
        self._publish()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._train_loop, name="learner", daemon=True)
        self.rank, self.world_size = rank, world_size
        self._store = None
        if world_size == 1:
            self._thread.start()

    # -- several learners ------------------------------------------------------------------------
    def group_address(self) -> tuple[str, int]:
        """Rank 0: open the group's rendezvous (a `TCPStore` on a port the OS picks) and say where it is."""
        import torch.distributed as dist

        self._store = dist.TCPStore(self._ray.util.get_node_ip_address(), 0, self.world_size, is_master=True,
                                    wait_for_workers=False)
        return self._ray.util.get_node_ip_address(), self._store.port

    def join_group(self, host: str, port: int) -> None:
        """Join the process group at `host:port` (gloo on CPU, NCCL on CUDA), take rank 0's model, and start
        training. Returns once every rank has joined."""
        import torch.distributed as dist

        from levelray.learner.data_parallel import DataParallel, init_group

        store = self._store or dist.TCPStore(host, port, self.world_size, is_master=False)
        backend = "nccl" if self.core.learner.device.type == "cuda" else "gloo"
        init_group(self.rank, self.world_size, store, backend)
        self.core.learner.join(DataParallel())
        self._publish()
        self._thread.start()

    # -- called by env actors ------------------------------------------------------------------
    def submit_batch(self, unrolls: list[Unroll], tally: StepTally | None = None):
        """Several unrolls in one call: an actor that sends n at a time pays Ray's per-call cost
        (task dispatch, reply, receipt) once for n. Each one is validated on its own; a malformed
        one is dropped and counted without affecting the others. `tally` (None: none) is counted first
        (`LearnerCore.accept_tally`); a malformed one is dropped and counted as `malformed_tally`. Once the budget
        is spent nothing is counted or queued, and the receipt says so (see "The budget" above)."""
        version = self.core.version
        if self.core.budget_spent:
            return self.receipt()
        if tally is not None:
            try:
                self.core.accept_tally(tally)
            except TrajectoryError as exc:
                self.core.count_malformed("malformed_tally")
                log.warning("rejected step tally: %s", exc)
        if not isinstance(unrolls, (list, tuple)):
            unrolls = [unrolls]
        for unroll in unrolls:
            try:
                validate_unroll(unroll, self.spec, unroll_length=self.cfg.actors.unroll_length,
                                level_range=self.level_range, current_version=version,
                                core_size=self.cfg.learner.lstm_size)
            except TrajectoryError as exc:
                self.core.count_malformed()
                log.warning("rejected unroll from actor %s: %s", unroll.get("actor_id") if isinstance(unroll, dict)
                            else "?", exc)
                continue
            while not self._stop.is_set() and not self.core.budget_spent:  # spent: it would never be taken
                try:
                    self.queue.put(unroll, timeout=0.5)
                    break
                except queue.Full:
                    continue
        return self.receipt()

    def latest_weights(self) -> tuple[int, list]:
        """`(version, [weights_ref])`: the weights published last (for the driver, and an actor's first fetch)."""
        with self.publish_lock:
            return self.version_published, [self.weights_ref]

    def receipt(self) -> Receipt:
        """What a submit is answered with: the latest weights, and whether the budget is spent."""
        return Receipt(*self.latest_weights(), budget_spent=self.core.budget_spent)

    # -- training ------------------------------------------------------------------------------
    def _publish(self) -> None:
        version, weights = self.core.learner.get_weights()
        ref = self._ray.put(weights)
        with self.publish_lock:
            self.version_published, self.weights_ref = version, ref

    def _take_fresh(self, n: int) -> list[Unroll] | None:
        """`n` fresh unrolls from the queue (None: stopped). Once the budget is spent it takes no more and returns
        those it has, the run's last batch (a single learner only: the ranks of several train in step)."""
        fresh: list[Unroll] = []
        while len(fresh) < n:
            if self.world_size == 1 and self.core.budget_spent:
                return fresh
            try:
                unroll = self.queue.get(timeout=0.2)
            except queue.Empty:
                if self._stop.is_set():
                    return None
                continue
            if self.core.accept(unroll):
                fresh.append(unroll)
        return fresh

    def _train_loop(self) -> None:
        try:
            while not self._stop.is_set():
                if self.core.budget_spent:  # nothing more is received; the driver stops the job at its next poll
                    self._stop.wait(0.1)
                    continue
                fresh = self._take_fresh(self.core.num_fresh)
                if fresh is None:
                    return
                if not fresh:  # the budget was spent before a batch began
                    continue
                with self.update_lock:
                    if self.core.train(fresh):  # {}: a skipped non-finite update, nothing new to publish
                        self._publish()
        except TrainingDiverged as exc:  # the message says it all; no traceback to read
            self.error = str(exc)
            log.error("%s", self.error)
        except Exception:  # surfaced through stats() so the driver can stop with the cause
            self.error = traceback.format_exc()
            log.error("learner thread failed:\n%s", self.error)

    # -- driver side ---------------------------------------------------------------------------
    def stats(self) -> dict:
        return {
            **self.core.stats(),
            "queue_depth": self.queue.qsize(),
            "node": self._ray.get_runtime_context().get_node_id(),
            "rank": self.rank,
            "replay_failures": self.replay.failures if self.replay is not None else 0,
            "replay_write_failures": self.replay.write_failures if self.replay is not None else {},
            "error": self.error,
            "time": time.time(),
        }

    def state(self) -> dict:
        """Learner state and counters for a checkpoint (taken between updates)."""
        with self.update_lock:
            return self.core.state_dict()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)


def learner_actor_class(num_gpus: float, resources: dict[str, float] | None = None):
    """The Ray shell, asking for a GPU when the cluster has one. Not restarted by Ray: Ray would
    re-run the constructor with the job's original arguments, not the latest checkpoint; the driver
    restarts it from the checkpoint instead (`RayJob.restart_learner`)."""
    import ray

    # No task events: actors call submit_batch() hundreds of times a second, and the GCS would keep a
    # record of every call (measured: +45 MB in a minute of CartPole).
    # MALLOC_ARENA_MAX: the submit threads deserialise unrolls of several MB each; glibc gives every
    # thread its own arena, and freed blocks stranded in many arenas made the learner's RSS creep
    # (+14% over 24 min of procgen in benchmarks/soak.py).
    return ray.remote(num_cpus=1, num_gpus=num_gpus, resources=resources or None, max_concurrency=256, max_restarts=0,
                      enable_task_events=False,
                      runtime_env={"env_vars": {"MALLOC_ARENA_MAX": "2", **wait_policy_env()}})(LearnerService)

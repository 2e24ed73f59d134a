"""`EnvActor`: a Ray actor (one CPU) that steps K environments with a local copy of the policy and
streams fixed-length unrolls to the learner.

Never stalls on the learner or the level service in steady state:
- it keeps exactly one submit in flight: while the learner takes unroll n, the actor already
  collects unroll n+1, and only then waits for n's receipt (with `unrolls_per_submit` > 1, the
  same holds for groups of unrolls sent in one call). A full learner queue therefore slows
  actors down (backpressure) instead of growing memory.
- the receipt carries the learner's latest version and a reference to its weights in the object
  store (one object per version, shared by all actors); weights are fetched only when the version
  changed. It also says when the run's budget is spent: the actor then sends nothing more and idles until
  stopped (`learner.service`, "The budget").
- level seeds come from a local buffer refilled asynchronously from the level service
  (`SeedPrefetcher`), so an episode end never waits on a remote call.
- the actor scores its finished episodes itself (`actors.episode_scorer`, with its own network) and sends their
  results to the level service every `REPORT_INTERVAL_S` at most (checked after each submit), and at once when a
  level window ends, so an actor that dies mid-window loses only that window's results. It never waits: replies
  are checked at the next send, and a refused or lost one is counted (`level_service_errors`).
- with level windows (`actors.level_windows`) the next window is requested from the level service at the start of
  each (`RemoteWindows`), so a window start does not wait on it either. A Robust PLR explore window's unrolls are
  not submitted: their env steps and episodes go as a tally with the next submit, and a submit is made (for the
  tally and the receipt, with its weights) even where every unroll of it was kept.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque

from levelray.actors.env_vector import LevelDraws
from levelray.actors.level_windows import ExploreTally, LevelWindows, RemoteWindows, window_unrolls
from levelray.contracts.config import RunConfig
from levelray.contracts.trajectory import Receipt

# Episode results are sent at most this often: a Ray call costs the level service ~1 ms of CPU, and an actor
# submits many unrolls a second where episodes are short, while scores only need to arrive within a second or so.
REPORT_INTERVAL_S = 0.5


class SeedPrefetcher(LevelDraws):
    """A local buffer of levels, `(level id, replayed)` pairs (with the encodings of edited ones, `LevelDraws`),
    refilled from the level service before it runs dry.

    Holds at least `per_env * num_envs` levels and asks for more when under half full. Where episodes are short
    (CartPole with a fresh policy ends ~100 episodes a second per env) that floor would mean a Ray call to the
    service every few milliseconds, whose fixed cost on both sides is what PLR's overhead mostly was; so the
    buffer grows to about `2 * REFILL_INTERVAL_S` seconds of levels at the rate they were used since the last
    refill, which keeps refills to about two a second, and shrinks back when episodes get longer. A level
    therefore waits at most about a second between being drawn and being played: PLR's scores move over many
    updates, and a Robust PLR replay flag is fixed when the level is drawn, so the wait changes nothing. Levels
    are handed out in the order the service gave them, to envs in the order they ask.

    Only `fill` (once, when the actor starts) waits for the service. During the step loop nothing does:
    a slow or restarting service would otherwise stall every env of the actor at each episode end. When
    the buffer is empty the env gets None (a uniform draw from the level set, as PLR's own exploration
    would, and a new level for Robust PLR) and the fallback is counted, visible in `levelray status`.
    """

    REFILL_INTERVAL_S = 0.5
    MAX_CAPACITY = 4096

    def __init__(self, level_service, num_envs: int, per_env: int):
        import ray

        super().__init__(num_envs)
        self._ray = ray
        self.service = level_service
        self.min_capacity = max(2, per_env * num_envs)
        self.capacity = self.min_capacity
        self.buffer: deque[tuple[int, bool]] = deque()
        self.pending = None
        self.requests = 0
        self.uniform_fallbacks = 0
        self.service_errors = 0
        self.last_error: str | None = None
        self._drawn = 0  # levels handed out (or fallen back on) so far
        self._last_request: tuple[float, int] | None = None  # (time, _drawn) at the last refill

    def _request(self) -> None:
        if self.pending is None:
            self._resize(time.monotonic())
            self.pending = self.service.draw_levels.remote(self.capacity - len(self.buffer))
            self.requests += 1

    def _resize(self, now: float) -> None:
        """Capacity for `2 * REFILL_INTERVAL_S` seconds of levels at the rate used since the last refill (`now`:
        `time.monotonic()`)."""
        if self._last_request is not None:
            then, drawn = self._last_request
            rate = (self._drawn - drawn) / max(now - then, 1e-3)
            wanted = int(2 * rate * self.REFILL_INTERVAL_S)
            self.capacity = min(self.MAX_CAPACITY, max(self.min_capacity, wanted))
        self._last_request = (now, self._drawn)

    def _collect(self, timeout_s: float) -> None:
        if self.pending is None:
            return
        ready, _ = self._ray.wait([self.pending], timeout=timeout_s)
        if ready:
            try:
                seeds, replayed, encodings = self._ray.get(self.pending)
                self.buffer.extend(zip((int(s) for s in seeds), (bool(r) for r in replayed), strict=True))
                self.remember(encodings, (level for level, _ in self.buffer))
            except self._ray.exceptions.RayError as exc:  # the service is restarting
                self.service_errors += 1
                self.last_error = f"{type(exc).__name__}"
            self.pending = None

    def fill(self, timeout_s: float = 10.0) -> None:
        """Wait (at most `timeout_s`) for a first buffer, so the first episodes play the service's levels."""
        self._request()
        self._collect(timeout_s)

    def next_level(self) -> tuple[int, bool] | None:
        """The next level; None (a uniform draw from the level set) when none is buffered."""
        self._drawn += 1
        self._collect(0)
        if not self.buffer:
            self._request()
            self.uniform_fallbacks += 1
            return None
        level = self.buffer.popleft()
        if len(self.buffer) < self.capacity // 2:
            self._request()
        return level


class EnvActor:
    """Ray shell: `ray.remote(num_cpus=1, max_concurrency=2)(EnvActor)`; `run()` occupies one
    concurrency slot for the actor's life, `stop()`/`info()` use the other."""

    def __init__(
        self,
        actor_id: int,
        cfg: RunConfig,
        learner,
        level_service=None,
        *,
        seed: int = 0,
    ):
        from levelray.actors.envs import make_env_vector
        from levelray.actors.episode_scorer import EpisodeScorer
        from levelray.actors.rollout import RolloutWorker
        from levelray.policy.threads import use_threads

        use_threads(1)  # one actor per core: a second thread lost 7% of the main job's env steps/s
        K = cfg.actors.envs_per_actor
        self.actor_id = actor_id
        self.learner = learner
        self.windows = None
        self.prefetcher = None  # the levels' source: a SeedPrefetcher, or RemoteWindows with level windows
        source = None
        if level_service and window_unrolls(cfg):
            self.prefetcher = RemoteWindows(level_service, K)
            self.windows = LevelWindows(self.prefetcher, K, window_unrolls(cfg), withhold=cfg.levels.robust)
            source = self.windows.levels
        elif level_service:
            self.prefetcher = source = SeedPrefetcher(level_service, K, cfg.actors.seed_prefetch)
            self.prefetcher.fill()
        envs = make_env_vector(cfg.env, K, source, seed=seed)
        self.worker = RolloutWorker(
            envs,
            cfg.actors.unroll_length,
            learner=cfg.learner,
            actor_id=actor_id,
            env_id_offset=actor_id * K,
            seed=seed,
            level_draws=source,
            scorer=EpisodeScorer.for_run(cfg) if self.prefetcher is not None else None,
            windows=self.windows,
        )
        self.tally = ExploreTally()
        self.level_service = level_service
        self._replies: list = []  # the level service's replies to episode results sent, not yet checked
        self._reported_at = 0.0  # time.monotonic() of the last send
        self.episodes_reported = 0
        self.unrolls_per_submit = cfg.actors.unrolls_per_submit
        self._stop = threading.Event()
        self.unrolls_sent = 0
        self.unrolls_collected = 0
        self.weight_fetches = 0
        self.weights_lost = 0  # receipts whose weights were gone (their object store's node lost)
        self.learner_lost = False
        self.budget_spent = False  # a receipt said so: the actor sends nothing more

    def _apply_receipt(self, receipt) -> bool:
        """Load the weights a receipt (`contracts.trajectory.Receipt`, or `latest_weights`' bare pair) names, if
        newer; returns whether it says the run's budget is spent. Weights lost with a node's object store
        (`ObjectLostError`, `OwnerDiedError` among them) are asked for again from the learner: a learner that is
        alive publishes a copy of its own; one that died with the node raises `RayActorError` here, and `run`
        waits to be replaced."""
        import ray

        version, ref_box, spent = Receipt(*receipt)
        # the first receipt is loaded whatever its version: until then the worker's network is its own random one,
        # not the learner's version 0 that its unrolls are labelled with
        if (version > self.worker.policy_version or not self.weight_fetches) and ref_box:
            try:
                weights = ray.get(ref_box[0])
            except ray.exceptions.ObjectLostError:
                self.weights_lost += 1
                version, ref_box = ray.get(self.learner.latest_weights.remote())
                weights = ray.get(ref_box[0])
            self.worker.set_weights(version, weights)
            self.weight_fetches += 1
        self.budget_spent = self.budget_spent or spent
        return spent

    def run(self, max_unrolls: int | None = None) -> int:
        """Collect and send unrolls until `stop()`, `max_unrolls`, or a receipt that says the budget is spent;
        returns unrolls sent.

        At the budget the unrolls collected while the last submit was in flight are dropped (the learner would
        refuse them: `learner.service`, "The budget") and the actor idles until stopped: a `run()` that returned
        would be replaced by the supervisor. If the learner dies, the actor idles too: the driver restarts the
        learner from its latest checkpoint and the supervisor replaces the actors bound to the old one."""
        import ray

        try:
            self._apply_receipt(ray.get(self.learner.latest_weights.remote()))
            in_flight = None
            while not self._stop.is_set() and (max_unrolls is None or self.unrolls_collected < max_unrolls):
                n = self.unrolls_per_submit if max_unrolls is None else min(self.unrolls_per_submit,
                                                                            max_unrolls - self.unrolls_collected)
                unrolls = self._collect(n)
                # backpressure: wait for the previous receipt
                if in_flight is not None and self._apply_receipt(ray.get(in_flight)):
                    self.tally.take()  # the learner would refuse them: dropped with the unrolls, never sent
                    in_flight = None
                    break
                tally = self.tally.take()
                in_flight = self.learner.submit_batch.remote(*((unrolls,) if tally is None else (unrolls, tally)))
                self.unrolls_sent += len(unrolls)
                self._report_episodes()
            if in_flight is not None:
                self._apply_receipt(ray.get(in_flight))
            self._report_episodes(now=True)
        except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError):
            self.learner_lost = True
        while (self.learner_lost or (self.budget_spent and max_unrolls is None)) and not self._stop.wait(0.5):
            pass
        return self.unrolls_sent

    def _collect(self, n: int) -> list[dict]:
        """`n` unrolls; those an explore window keeps on the actor (`RolloutWorker.withheld`) go to the tally."""
        unrolls = []
        for _ in range(n):
            unroll = self._unroll()
            if self.worker.withheld:
                self.tally.add(unroll)
            else:
                unrolls.append(unroll)
        return unrolls

    def _unroll(self) -> dict:
        """One unroll; the episodes of a window that ends in it are sent to the level service at once."""
        windows_begun = self.windows.windows if self.windows is not None else 0
        unroll = self.worker.unroll()
        self.unrolls_collected += 1
        if self.windows is not None and self.windows.windows != windows_begun:
            self._report_episodes(now=True)
        return unroll

    def _report_episodes(self, now: bool = False) -> None:
        """Send the episodes scored since the last send to the level service: at most every `REPORT_INTERVAL_S`,
        unless `now` (a window's end, the run's end); never waits for a reply."""
        if self.worker.scorer is None or not (now or time.monotonic() - self._reported_at >= REPORT_INTERVAL_S):
            return
        import ray

        if self._replies:
            ready, self._replies = ray.wait(self._replies, num_returns=len(self._replies), timeout=0)
            for reply in ready:
                try:
                    ray.get(reply)
                except ray.exceptions.RayError as exc:  # refused (bad input) or the service is restarting
                    self.prefetcher.service_errors += 1
                    self.prefetcher.last_error = type(exc).__name__
        results = self.worker.scorer.take()
        if results is not None:
            self._reported_at = time.monotonic()
            self._replies.append(self.level_service.report_episodes.remote(results))
            self.episodes_reported += len(results)

    def stop(self) -> None:
        self._stop.set()

    def info(self) -> dict:
        import ray

        return {
            "id": self.actor_id,
            "pid": os.getpid(),
            "node": ray.get_runtime_context().get_node_id(),
            "env_steps": self.worker.env_steps,
            "unrolls_sent": self.unrolls_sent,
            "unrolls_collected": self.unrolls_collected,
            "level_windows": self.windows.windows if self.windows is not None else 0,
            "policy_version": self.worker.policy_version,
            "weight_fetches": self.weight_fetches,
            "weights_lost": self.weights_lost,
            "learner_lost": self.learner_lost,
            "budget_spent": self.budget_spent,
            "seed_uniform_fallbacks": self.prefetcher.uniform_fallbacks if self.prefetcher else 0,
            "level_service_errors": self.prefetcher.service_errors if self.prefetcher else 0,
        }

    def collect(self, n: int) -> list[dict]:
        """Collect `n` unrolls and return them instead of sending them to the learner (for tests and evaluation),
        withheld ones included; episode results go to the level service as in `run`, at window ends."""
        return [self._unroll() for _ in range(n)]


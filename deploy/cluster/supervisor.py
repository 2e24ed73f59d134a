"""The supervisor: a named Ray actor that owns the env actors of a job.

`levelray scale` and `levelray status` find it by name (`levelray-supervisor` in namespace
`levelray`), from any process connected to the cluster. A monitor thread watches each actor's
long-running `run()` call: when it ends with an error (process killed, node lost, an exception at
start) the actor is replaced, with a new id, and counted in `actor_restarts`.

Placement. Env actors are spread over the cluster's nodes (Ray's `SPREAD` strategy, best effort over the nodes
that can hold them), so one lost node takes few of them, and a node added to the cluster takes its share of the
next ones.

Resources. An env actor asks Ray for `actor_cpus` logical CPUs (`--actor-cpus`; by default 1 on a
cluster and 0 on the embedded local Ray, see `RayJob`):
- on a cluster the request is what places actors across nodes and what an autoscaler reads to add
  nodes, so it stays 1 CPU per actor; an actor that does not fit yet is `pending`, and `status` says
  what it waits for ("waiting for 1 CPU (0 of 8 CPU free)").
- the embedded Ray (`levelray train` without `--address`) runs on the user's own machine, where Ray's
  accounting of logical CPUs could only refuse work: it starts with max(cores, actors + 1) logical
  CPUs, so one-CPU actors past that would stay pending forever after a `levelray scale` (the third
  actor on a 2-core machine). There actors ask for no CPU and the OS shares the cores among them: once
  actors outnumber cores each one steps more slowly, but `scale` does what the user asked.

Status. `status()` asks every started actor for its `info()` at once and waits for the answers with
one `ray.wait` of at most `STATUS_TIMEOUT_S`: an actor that has not started (its constructor has not
returned) is `pending` with the reason (the resources it waits for, or that it is starting on a
node), a started one that does not answer in time is `unresponsive`. So `status` returns within a
few seconds whatever the cluster does.

Crash loops. An actor that dies before it has run for `HEALTHY_AFTER_S` *failed*; its replacement
inherits the count of failures in a row (a lineage), and waits `respawn_delay(failures)` before it
starts: 0.5 s, doubling to 30 s. A death after a healthy run resets the count (a lost node is not a
crash loop). When a lineage fails more than `actors.max_restarts` times in a row (`--max-actor-
restarts`) the supervisor stops replacing actors and sets `error`, with the last failure's message;
the driver sees it in its next poll and ends the run with that message. The last failure of any
actor is in `status()["last_actor_error"]` and in the `levelray_actor_last_error` metric.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from typing import Any

import ray

from levelray.actors.env_actor import EnvActor
from levelray.contracts.config import RunConfig
from levelray.contracts.status import SupervisorStatus
from levelray.deploy.errors import error_summary
from levelray.learner.ranks import merge_stats

log = logging.getLogger(__name__)

SUPERVISOR_NAME = "levelray-supervisor"
NAMESPACE = "levelray"

STATUS_TIMEOUT_S = 2.0  # how long `status()` waits for started actors to answer `info()`
RESPAWN_DELAY_S = 0.5  # the first replacement of a failed actor waits this long ...
RESPAWN_DELAY_MAX_S = 30.0  # ... doubling with every failure in a row, up to this
HEALTHY_AFTER_S = 60.0  # an actor that ran this long after starting did not fail: its lineage's count resets
def respawn_delay(failures: int) -> float:
    """Seconds before a replacement starts, after `failures` failures in a row (0: the actor died after a
    healthy run)."""
    return min(RESPAWN_DELAY_MAX_S, RESPAWN_DELAY_S * 2 ** max(failures - 1, 0))


def _amount(value: float) -> str:
    return f"{value:g}"


class Supervisor:
    """The env actors of one job (a Ray actor, see the module doc): `scale`, `status`, and the monitor thread
    that replaces the ones that die."""

    def __init__(self, cfg: RunConfig, learner, level_service=None, *, seed: int = 0, actor_cpus: float = 1.0,
                 monitor_interval_s: float = 0.5):
        self.cfg = cfg
        self.learners = list(learner) if isinstance(learner, list | tuple) else [learner]
        self.level_service = level_service
        self.seed = seed
        self.actor_cpus = float(actor_cpus)
        self.max_restarts = self.cfg.actors.max_restarts
        self._actor_cls = ray.remote(num_cpus=self.actor_cpus, max_concurrency=4,
                                     enable_task_events=False)(EnvActor)
        # id -> {"handle", "run_ref", "ready_ref", "ready_at", "spawned", "failures", "pid", "node"}
        self.actors: dict[int, dict] = {}
        # replacements waiting for their delay: {"due", "delay_s", "failures", "replaces", "error"}
        self.respawns: list[dict] = []
        self.desired = 0
        self.next_id = 0
        self.restarts = 0
        self.failures = 0  # deaths before a healthy run, over the job
        self.last_error: dict | None = None  # the latest actor death: {"time", "actor", "error", "when"}
        self.error: str | None = None  # set when a lineage ran out of restarts: the job must stop
        # the latest deaths: {"time", "actor", "when", "error", "failures", "delay_s", "respawned_at"}
        self.deaths: deque[dict] = deque(maxlen=20)
        self.lock = threading.RLock()
        self._stopping = False
        self.progress: dict = {}
        self._monitor_interval = monitor_interval_s
        self._thread = threading.Thread(target=self._monitor, daemon=True, name="supervisor-monitor")
        self._thread.start()

    # -- actors --------------------------------------------------------------------------------
    def _spawn(self, failures: int = 0) -> None:
        actor_id = self.next_id
        self.next_id += 1
        # several learners: each new actor feeds the one with the fewest actors, so their batches fill alike
        load = [sum(1 for a in self.actors.values() if a["learner"] == i) for i in range(len(self.learners))]
        learner = load.index(min(load))
        handle = self._actor_cls.options(name=None, max_restarts=0, scheduling_strategy="SPREAD").remote(
            actor_id, self.cfg, self.learners[learner], self.level_service, seed=self.seed * 100_003 + actor_id,
        )
        self.actors[actor_id] = {
            "handle": handle, "run_ref": handle.run.remote(), "ready_ref": handle.__ray_ready__.remote(),
            "ready_at": None, "spawned": time.time(), "failures": failures, "pid": None, "node": None,
            "learner": learner,
        }

    def _retire(self, actor_id: int) -> None:
        entry = self.actors.pop(actor_id)
        if entry["ready_at"] is None:  # not started: nothing to flush
            with contextlib.suppress(Exception):
                ray.kill(entry["handle"])
            return
        with contextlib.suppress(Exception):  # already dead
            entry["handle"].stop.remote()
        # Give it a moment to flush its last unroll, then free its CPU for good.
        threading.Timer(5.0, ray.kill, args=(entry["handle"],)).start()

    def _slots(self) -> int:
        return len(self.actors) + len(self.respawns)

    def scale(self, num_actors: int) -> dict:
        """Ask for `num_actors` env actors. Down: replacements still waiting for their delay go first, then
        actors that have not started, then the newest."""
        if not isinstance(num_actors, int) or num_actors < 0:
            raise ValueError(f"num_actors must be a non-negative int, got {num_actors!r}")
        with self.lock:
            if self.error is not None:
                raise RuntimeError(f"the job is stopping because env actors keep failing: {self.error}")
            previous = len(self.actors)
            self.desired = num_actors
            while self._slots() < num_actors:
                self._spawn()
            if self._slots() > num_actors:
                self.respawns.sort(key=lambda r: r["due"])
                del self.respawns[max(num_actors - len(self.actors), 0):]
                order = sorted(self.actors, key=lambda i: (self.actors[i]["ready_at"] is None, i))
                for actor_id in order[num_actors - len(self.respawns):]:
                    self._retire(actor_id)
            return {"actors_desired": self.desired, "actors": len(self.actors), "previous": previous}

    def set_learner(self, learner) -> dict:
        """Bind the job to a new learner (after the old one died): every env actor is replaced by
        one that sends to `learner`. These replacements are not counted as actor restarts."""
        with self.lock:
            self.learners = list(learner) if isinstance(learner, list | tuple) else [learner]
            for actor_id in sorted(self.actors):
                self._retire(actor_id)
            while self._slots() < self.desired:
                self._spawn()
            return {"actors_desired": self.desired, "actors": len(self.actors)}

    # -- the monitor ---------------------------------------------------------------------------
    def _monitor(self) -> None:
        while not self._stopping:
            time.sleep(self._monitor_interval)
            try:
                self._check()
            except Exception:  # the monitor must outlive anything one check runs into
                log.exception("supervisor monitor check failed")

    def _refresh_ready(self, entries: dict[int, dict]) -> None:
        """Mark the actors whose constructor has returned (without waiting)."""
        refs = {e["ready_ref"]: e for e in entries.values() if e["ready_at"] is None}
        if not refs:
            return
        done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
        now = time.time()
        for ref in done:
            with contextlib.suppress(Exception):  # a failed start shows up in run_ref
                ray.get(ref)
                refs[ref]["ready_at"] = now

    def _check(self) -> None:
        with self.lock:
            entries = dict(self.actors)
        self._refresh_ready(entries)
        refs = {e["run_ref"]: i for i, e in entries.items()}
        done = ray.wait(list(refs), num_returns=len(refs), timeout=0)[0] if refs else []
        for ref in done:
            try:
                ray.get(ref)
                reason = "run() returned"
            except Exception as exc:  # RayActorError, node loss, a crash in the constructor or in run()
                reason = error_summary(exc)
            self._ended(refs[ref], reason)
        now = time.time()
        with self.lock:
            if self._stopping or self.error is not None:
                return
            for respawn in [r for r in self.respawns if r["due"] <= now]:
                self.respawns.remove(respawn)
                respawn["death"]["respawned_at"] = now
                self._spawn(failures=respawn["failures"])

    def _ended(self, actor_id: int, reason: str) -> None:
        with self.lock:
            if self._stopping or actor_id not in self.actors:
                return
            entry = self.actors.pop(actor_id)
            with contextlib.suppress(Exception):  # run() may have raised with the process still up
                ray.kill(entry["handle"])
            now = time.time()
            ready_at = entry["ready_at"]
            healthy = ready_at is not None and now - ready_at >= HEALTHY_AFTER_S
            failures = 0 if healthy else entry["failures"] + 1
            when = "at start" if ready_at is None else f"after {now - ready_at:.0f} s"
            self.last_error = {"time": now, "actor": actor_id, "error": reason, "when": when}
            death = {**self.last_error, "failures": failures, "delay_s": None, "respawned_at": None}
            self.deaths.append(death)
            if not healthy:
                self.failures += 1
            if self.error is not None:  # the job is stopping: replace nothing, keep the first error
                return
            if failures > self.max_restarts:
                self.error = (f"env actor {actor_id} failed {failures} times in a row (the last {when}; "
                              f"--max-actor-restarts {self.max_restarts}): {reason}")
                log.error("%s; no more replacements, the job stops", self.error)
                self.respawns.clear()
                return
            if self._slots() >= self.desired:
                log.warning("env actor %d ended %s (%s); not replaced (scaled down)", actor_id, when, reason)
                return
            delay = death["delay_s"] = respawn_delay(failures)
            self.respawns.append({"due": now + delay, "delay_s": delay, "failures": failures,
                                  "replaces": actor_id, "error": reason, "death": death})
            self.restarts += 1
            log.warning("env actor %d ended %s (%s); replacing it in %.1f s (failures in a row: %d)",
                        actor_id, when, reason, delay, failures)

    # -- status --------------------------------------------------------------------------------
    def _placement(self, entries: dict[int, dict]) -> dict[int, dict]:
        """Where Ray's control store says each not-started actor is: {"pid", "ip"} once it has a worker
        process (placed, constructor running), absent while it waits to be placed. Best effort: an empty
        answer when the (internal) actor table cannot be read."""
        if not entries:
            return {}
        try:
            from ray._private import state  # internal: a Ray without it only loses the pending actors' places

            job = ray.JobID.from_hex(ray.get_runtime_context().get_job_id())
            table = state.actors(job_id=job, actor_state_name="PENDING_CREATION")
            by_hex = {e["handle"]._actor_id.hex(): i for i, e in entries.items()}
        except Exception:
            return {}
        out = {}
        for actor_hex, row in table.items():
            address = row.get("Address") or {}
            if actor_hex in by_hex and address.get("IPAddress"):  # no address yet: not placed
                out[by_hex[actor_hex]] = {"pid": row.get("Pid") or None, "ip": address["IPAddress"],
                                          "node": address.get("NodeID")}
        return out

    def _waiting_for(self) -> str:
        """Why an actor that no node has started yet is waiting: the resources it asks for, against the
        cluster's."""
        if self.actor_cpus <= 0:
            return "waiting for Ray to start its worker process"
        need = f"{_amount(self.actor_cpus)} CPU"
        try:
            nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
            free = ray.available_resources().get("CPU", 0.0)
            total = ray.cluster_resources().get("CPU", 0.0)
        except Exception:
            return f"waiting for {need}"
        largest = max((n.get("CPU", 0.0) for n in nodes), default=0.0)
        if largest < self.actor_cpus:
            return (f"waiting for {need}: no node has that many (the largest has {_amount(largest)}); "
                    "an autoscaler must add a node")
        return f"waiting for {need} ({_amount(free)} of {_amount(total)} CPU free)"

    def status(self, timeout_s: float = STATUS_TIMEOUT_S) -> SupervisorStatus:
        """Every actor as `alive`, `pending` (with what it waits for) or `unresponsive`, within about
        `timeout_s` seconds: one `ray.wait` over all started actors' `info()` calls."""
        with self.lock:  # one consistent snapshot: the monitor may record a death while this waits below
            entries = dict(self.actors)
            respawns = [dict(r) for r in self.respawns]
            deaths = [dict(d) for d in self.deaths]
            counts = {"actor_restarts": self.restarts, "actor_failures": self.failures,
                      "desired": self.desired, "error": self.error,
                      "last_actor_error": dict(self.last_error) if self.last_error else None}
        self._refresh_ready(entries)
        started = {i: e for i, e in entries.items() if e["ready_at"] is not None}
        refs = {e["handle"].info.remote(): i for i, e in started.items()}
        answers: dict[int, Any] = {}
        if refs:
            done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s)
            for ref in done:
                try:
                    answers[refs[ref]] = ray.get(ref)
                except Exception as exc:  # died since: the monitor replaces it
                    answers[refs[ref]] = exc
        not_started = {i: e for i, e in entries.items() if e["ready_at"] is None}
        placement = self._placement(not_started)
        waiting = self._waiting_for() if len(placement) < len(not_started) else ""
        now = time.time()
        actors = []
        for actor_id, entry in sorted(entries.items()):
            answer = answers.get(actor_id)
            if isinstance(answer, dict):
                entry["pid"], entry["node"] = answer.get("pid"), answer.get("node")
                actors.append({**answer, "state": "alive", "alive": True, "reason": None})
                continue
            info = {"id": actor_id, "pid": entry["pid"], "node": entry["node"], "alive": False}
            if actor_id in not_started:
                where = placement.get(actor_id)
                if where is not None:
                    info.update(pid=where["pid"], node=where["node"])
                    reason = f"placed on {where['ip']}, its constructor is running"
                else:
                    reason = waiting
                info.update(state="pending", reason=f"{reason}, for {now - entry['spawned']:.0f} s")
            elif isinstance(answer, BaseException):
                info.update(state="dead", reason=error_summary(answer))
            else:
                info.update(state="unresponsive",
                            reason=f"running, but did not answer within {timeout_s:g} s")
            actors.append(info)
        return {
            "actors_alive": sum(a["state"] == "alive" for a in actors),
            "actors_desired": counts["desired"],
            "actors_pending": sum(a["state"] == "pending" for a in actors),
            "actors_unresponsive": sum(a["state"] == "unresponsive" for a in actors),
            "actor_restarts": counts["actor_restarts"],
            "actor_failures": counts["actor_failures"],
            "actor_cpus": self.actor_cpus,
            "restart_backoff_s": max((r["delay_s"] for r in respawns), default=0.0),
            "respawns": [{"replaces": r["replaces"], "in_s": round(max(r["due"] - now, 0.0), 2),
                          "delay_s": r["delay_s"], "failures": r["failures"], "error": r["error"]}
                         for r in sorted(respawns, key=lambda r: r["due"])],
            "last_actor_error": counts["last_actor_error"],
            "recent_deaths": deaths,
            "error": counts["error"],
            "actors": actors,
            "progress": dict(self.progress),
        }

    def stop_all(self) -> None:
        with self.lock:
            self._stopping = True
            entries = list(self.actors.values())
            self.actors.clear()
            self.respawns.clear()
            self.desired = 0
        for e in entries:
            with contextlib.suppress(Exception):
                e["handle"].stop.remote()
        refs = [e["run_ref"] for e in entries if e["ready_at"] is not None]
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=10)
        for e in entries:
            ray.kill(e["handle"])

    def set_progress(self, progress: dict) -> None:
        """The driver's latest view of the job (e.g. env steps/s, which only the driver computes), kept
        here so that `levelray status` from another process shows the same numbers as the progress line."""
        self.progress = dict(progress)

    def learner_stats(self, timeout_s: float = 10.0) -> dict:
        """The learner's stats, or `{"unavailable": why}` when it does not answer in `timeout_s`."""
        try:
            return merge_stats(ray.get([learner.stats.remote() for learner in self.learners], timeout=timeout_s))
        except Exception as exc:  # GetTimeoutError, RayActorError: the learner is busy, restarting or gone
            return {"unavailable": error_summary(exc)}

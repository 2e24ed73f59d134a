"""The supervisor: a named Ray actor that owns the env actors of a job.

`levelray scale` and `levelray status` find it by name (`levelray-supervisor` in namespace
`levelray`), from any process connected to the cluster. A monitor thread watches each actor's
long-running `run()` call: when it ends with an error (process killed, node lost) the actor is
replaced, with a new id, and counted in `actor_restarts`.

Resources. An env actor asks Ray for `actor_cpus` logical CPUs (`--actor-cpus`; by default 1 on a
cluster and 0 on the embedded local Ray, see `RayJob`):
- on a cluster the request is what places actors across nodes and what an autoscaler reads to add
  nodes, so it stays 1 CPU per actor.
- the embedded Ray (`levelray train` without `--address`) runs on the user's own machine, where Ray's
  accounting of logical CPUs could only refuse work: it was started with max(cores, actors + 1)
  logical CPUs, so `levelray scale` past that left the extra actors pending forever (the third actor
  on a 2-core machine). There actors ask for no CPU and the OS shares the cores among them: once
  actors outnumber cores each one steps more slowly, but `scale` does what the user asked.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

SUPERVISOR_NAME = "levelray-supervisor"
NAMESPACE = "levelray"


class Supervisor:
    def __init__(self, cfg_dict: dict, learner, level_service=None, *, seed: int = 0, actor_cpus: float = 1.0,
                 monitor_interval_s: float = 0.5):
        import ray

        from levelray.actors.env_actor import EnvActor
        from levelray.contracts.config import from_dict

        self._ray = ray
        self.cfg_dict = cfg_dict
        self.cfg = from_dict(cfg_dict)
        self.learner = learner
        self.level_service = level_service
        self.seed = seed
        self.actor_cpus = float(actor_cpus)
        self._actor_cls = ray.remote(num_cpus=self.actor_cpus, max_concurrency=4,
                                     enable_task_events=False)(EnvActor)
        self.actors: dict[int, dict] = {}  # id -> {"handle", "run_ref", "info"}
        self.desired = 0
        self.next_id = 0
        self.restarts = 0
        self.lock = threading.RLock()
        self._stopping = False
        self.progress: dict = {}
        self._monitor_interval = monitor_interval_s
        self._thread = threading.Thread(target=self._monitor, daemon=True, name="supervisor-monitor")
        self._thread.start()

    def _spawn(self) -> None:
        actor_id = self.next_id
        self.next_id += 1
        handle = self._actor_cls.options(name=None, max_restarts=0).remote(
            actor_id, self.cfg_dict, self.learner, self.level_service, seed=self.seed * 100_003 + actor_id,
        )
        self.actors[actor_id] = {"handle": handle, "run_ref": handle.run.remote(), "info": None, "since": time.time()}

    def _retire(self, actor_id: int) -> None:
        entry = self.actors.pop(actor_id)
        with contextlib.suppress(Exception):  # already dead
            entry["handle"].stop.remote()
        # Give it a moment to flush its last unroll, then free its CPU for good.
        threading.Timer(5.0, self._ray.kill, args=(entry["handle"],)).start()

    def scale(self, num_actors: int) -> dict:
        if not isinstance(num_actors, int) or num_actors < 0:
            raise ValueError(f"num_actors must be a non-negative int, got {num_actors!r}")
        with self.lock:
            previous = len(self.actors)
            self.desired = num_actors
            while len(self.actors) < num_actors:
                self._spawn()
            for actor_id in sorted(self.actors)[num_actors:]:
                self._retire(actor_id)
            return {"actors_desired": self.desired, "actors": len(self.actors), "previous": previous}

    def set_learner(self, learner) -> dict:
        """Bind the job to a new learner (after the old one died): every env actor is replaced by
        one that sends to `learner`. These replacements are not counted as actor restarts."""
        with self.lock:
            self.learner = learner
            for actor_id in sorted(self.actors):
                self._retire(actor_id)
            while len(self.actors) < self.desired:
                self._spawn()
            return {"actors_desired": self.desired, "actors": len(self.actors)}

    def _monitor(self) -> None:
        while not self._stopping:
            time.sleep(self._monitor_interval)
            with self.lock:
                refs = {e["run_ref"]: i for i, e in self.actors.items()}
            if not refs:
                continue
            done, _ = self._ray.wait(list(refs), num_returns=len(refs), timeout=0)
            for ref in done:
                actor_id = refs[ref]
                try:
                    self._ray.get(ref)
                    reason = "returned"
                except Exception as exc:  # RayActorError, node loss, a crash inside run()
                    reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                with self.lock:
                    if self._stopping or actor_id not in self.actors:
                        continue
                    log.warning("env actor %d ended (%s); replacing it", actor_id, reason)
                    self.actors.pop(actor_id)
                    self.restarts += 1
                    if len(self.actors) < self.desired:
                        self._spawn()

    def status(self) -> dict:
        with self.lock:
            entries = dict(self.actors)
        infos = {i: e["handle"].info.remote() for i, e in entries.items()}
        actors = []
        for actor_id, ref in infos.items():
            try:
                info = self._ray.get(ref, timeout=5)
                alive = True
            except Exception:
                info, alive = {"id": actor_id, "pid": None, "node": None}, False
            info["alive"] = alive
            actors.append(info)
        return {
            "actors_alive": sum(a["alive"] for a in actors),
            "actors_desired": self.desired,
            "actor_restarts": self.restarts,
            "actor_cpus": self.actor_cpus,
            "actors": sorted(actors, key=lambda a: a["id"]),
            "progress": dict(self.progress),
        }

    def stop_all(self) -> None:
        with self.lock:
            self._stopping = True
            entries = list(self.actors.values())
            self.actors.clear()
            self.desired = 0
        for e in entries:
            with contextlib.suppress(Exception):
                e["handle"].stop.remote()
        refs = [e["run_ref"] for e in entries]
        if refs:
            self._ray.wait(refs, num_returns=len(refs), timeout=10)
        for e in entries:
            self._ray.kill(e["handle"])

    def set_progress(self, progress: dict) -> None:
        """The driver's latest view of the job (e.g. env steps/s, which only the driver computes), kept
        here so that `levelray status` from another process shows the same numbers as the progress line."""
        self.progress = dict(progress)

    def learner_stats(self) -> dict:
        return self._ray.get(self.learner.stats.remote(), timeout=30)

    def handles(self) -> dict[int, Any]:
        """Actor id -> handle of the live actors (for tests and tools)."""
        with self.lock:
            return {i: e["handle"] for i, e in self.actors.items()}


"""Chaos run: train CartPole on an embedded Ray while killing its processes, then check what survived.

    python -m benchmarks.chaos [--minutes 10] [--kills 24] [--node-kills 10] [--seed 0]
                               [--json benchmarks/results/chaos.json]

The job is the one `levelray train` runs (the driver loop of `deploy.training.driver.run` over a `RayJob`), with PLR
(level service), replay (replay service) and periodic checkpoints on. Every `minutes * 60 / kills` seconds
(jittered) one process is killed with SIGKILL, chosen in turn among: an env actor, the learner, the level
service and the replay service. Afterwards it checks, prints and writes:

- counters monotone: env steps, episodes, updates and samples never step back in `metrics.jsonl`;
- every checkpoint loadable (sizes and SHA-256 digests verified), and the run resumable
  (`train(..., resume=True)` for a few more thousand steps);
- the services lost at most one snapshot interval: at each service kill, how old the state the restarted
  service came back with is (its call counters against those sampled before the kill), and that it came
  back from its snapshot;
- training still improving: the best mean return after the first kill above the mean return at the first
  report.

With `--node-kills N` the job runs on a Ray cluster of several nodes on this machine (`ray.cluster_utils.Cluster`:
a head with no CPU for work, where the driver, the services and the supervisor live, and two worker nodes of 4
CPUs with their own raylets and object stores), and N times, evenly spread and between the process kills, a
worker node is removed without warning (`remove_node(..., allow_graceful=False)`), every process on it at once:
in turn the node holding the learner and a node holding env actors only. A new node joins in its place, as a spot
fleet would replace it. Each node kill also records what the node held and `recovered_s`, the seconds until every
env actor was alive again and the learner answered; the check `nodes_recovered` asks that of every node kill
within `NODE_RECOVERY_S`.

`tests/test_reliability.py` runs a short version (one kill of each kind) in the suite.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.common import print_table, write_json

KINDS = ("actor", "learner", "levels", "replay")
COUNTERS = ("env_steps", "episodes", "learner_version", "samples_trained")
SNAPSHOT_FILES = {"levels": "levels.msgpack", "replay": "replay.msgpack"}
NODE = {"num_cpus": 4, "object_store_memory": 200 * 1024 * 1024}  # each worker node of the simulated cluster
NODE_RECOVERY_S = 120.0


def chaos_config(run_dir: str, *, snapshot_interval_s: float = 5.0, checkpoint_interval: int = 100):
    from levelray.contracts.config import RunConfig, replace_paths

    return replace_paths(RunConfig(), {
        "env.id": "CartPole-v1",
        "env.num_levels": 50,  # a level service (PLR over 50 reset seeds)
        "actors.num_actors": 2,
        "actors.envs_per_actor": 8,
        "actors.unrolls_per_submit": 4,
        "learner.batch_size": 8,
        "learner.learning_rate": 1e-3,
        "replay.replay_ratio": 0.25,  # a replay service: 2 replayed unrolls per batch of 8
        "replay.min_size": 8,
        "levels.snapshot_interval_s": snapshot_interval_s,
        "replay.snapshot_interval_s": snapshot_interval_s,
        "checkpoint_interval_updates": checkpoint_interval,
        "max_learner_restarts": 1000,
        "metrics_port": 0,
        "report_interval_s": 1.0,
        "total_steps": 10**12,
        "run_dir": run_dir,
    })


def _pid(handle, timeout: float = 30.0) -> int | None:
    import ray

    try:
        return int(ray.get(handle.__ray_call__.remote(lambda self: os.getpid()), timeout=timeout))
    except Exception:  # restarting: try again at the next kill
        return None


def _victim(job, kind: str, rng: random.Random) -> tuple[int | None, str]:
    import ray

    if kind == "actor":
        try:
            actors = [a for a in ray.get(job.supervisor.status.remote(), timeout=30)["actors"] if a.get("alive")]
        except Exception:
            return None, "supervisor did not answer"
        if not actors:
            return None, "no live actor"
        actor = rng.choice(actors)
        return int(actor["pid"]), f"env actor {actor['id']}"
    handle = {"learner": job.learner, "levels": job.level_service, "replay": job.replay_service}[kind]
    return _pid(handle), kind


def _progress(stats: dict, kind: str) -> int:
    """How many state-changing calls a service has taken (restored from its snapshot with the state)."""
    if kind == "levels":
        return int(stats["num_update_calls"]) + int(stats["num_sample_calls"])
    return int(stats["inserts"]) + int(stats["updates"])


class ServiceWatch:
    """Samples both services' call counters twice a second, so that after a kill the restored state can be
    dated: the restored counter is the counter the service had at some moment before the kill, and
    `content_age` is how long before the kill that was. (The snapshot file's age overstates the loss when the
    service was idle, e.g. while the learner restarted: no calls, nothing to lose, no snapshot written.)"""

    def __init__(self, job):
        self.job = job
        self.history: dict[str, list[tuple[float, int]]] = {"levels": [], "replay": []}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="chaos-watch")
        self._thread.start()

    def _handle(self, kind: str):
        return self.job.level_service if kind == "levels" else self.job.replay_service

    def _loop(self) -> None:
        import ray

        while not self._stop.wait(0.5):
            for kind in self.history:
                try:
                    stats = ray.get(self._handle(kind).stats.remote(), timeout=2)
                except Exception:  # restarting
                    continue
                self.history[kind].append((time.time(), _progress(stats, kind)))

    def restored(self, kind: str, killed_at: float, timeout: float = 60.0) -> dict[str, Any]:
        """Wait for the restarted service; whether it came back from its snapshot, and the age of what it has."""
        import ray

        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                stats = ray.get(self._handle(kind).stats.remote(), timeout=5)
                break
            except Exception:
                time.sleep(0.2)
        else:
            return {"restored_from_snapshot": False, "content_age_s": None}
        restored = _progress(stats, kind)
        from_snapshot = bool(stats.get("restored_from_snapshot") if kind == "levels" else stats.get("restored_from"))
        before = [(t, c) for t, c in self.history[kind] if t <= killed_at]
        # the last sample the restored state still covers; everything after it was lost
        covered = [t for t, c in before if c <= restored]
        age = killed_at - covered[-1] if covered else None
        if before and before[-1][1] <= restored:
            age = 0.0  # nothing observed before the kill is missing
        return {"restored_from_snapshot": from_snapshot, "content_age_s": None if age is None else round(age, 2)}

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def start_cluster():
    """A Ray cluster of a head (no CPU for work) and two worker nodes on this machine; connects this process."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0,
                                                            "object_store_memory": NODE["object_store_memory"]})
    for _ in range(2):
        cluster.add_node(**NODE)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace="levelray", log_to_driver=False)
    return cluster


def _held(job, node_id: str) -> dict[str, Any]:
    """What of the job runs on `node_id`: the learner (bool) and the env actors' ids."""
    import ray

    try:
        learner_node = ray.get(job.learner.stats.remote(), timeout=10).get("node")
        actors = ray.get(job.supervisor.status.remote(), timeout=30)["actors"]
    except Exception:  # restarting: judged by what is known
        learner_node, actors = None, []
    return {"learner": learner_node == node_id, "actors": [a["id"] for a in actors if a.get("node") == node_id]}


def _recovered(job, desired: int, timeout: float) -> float | None:
    """Seconds until `desired` env actors are alive and the learner answers (None: not within `timeout`)."""
    import ray

    start = time.time()
    while time.time() - start < timeout:
        try:
            alive = ray.get(job.supervisor.status.remote(), timeout=10)["actors_alive"]
            ray.get(job.learner.stats.remote(), timeout=10)
            if alive >= desired:
                return round(time.time() - start, 1)
        except Exception:  # the learner restarting, the supervisor busy
            pass
        time.sleep(0.5)
    return None


def kill_node(cluster, job, i: int, rng: random.Random) -> dict[str, Any]:
    """Remove a worker node (in turn the learner's and one with env actors only) without warning, add a new
    one in its place, and time the job's recovery."""
    workers = list(cluster.worker_nodes)
    held = {w.node_id: _held(job, w.node_id) for w in workers}
    want_learner = i % 2 == 0
    candidates = [w for w in workers if held[w.node_id]["learner"] == want_learner] or workers
    node = rng.choice(candidates)
    event: dict[str, Any] = {"kind": "node", "pid": None, "node": node.node_id[:8], **held[node.node_id]}
    event["victim"] = (f"node {node.node_id[:8]} (" + ("learner, " if event["learner"] else "")
                       + f"actors {event['actors']})")
    cluster.remove_node(node, allow_graceful=False)
    cluster.add_node(**NODE)
    event["recovered_s"] = _recovered(job, job.cfg.actors.num_actors, NODE_RECOVERY_S)
    return event


def run_chaos(run_dir: str | os.PathLike, *, seconds: float, kills: int, seed: int = 0, warmup_s: float = 10.0,
              snapshot_interval_s: float = 5.0, checkpoint_interval: int = 100,
              resume_steps: int = 5_000, node_kills: int = 0, cluster=None, log=print) -> dict[str, Any]:
    """Train for `seconds`, killing `kills` processes (kinds in turn, spread evenly after `warmup_s`) and, with
    a `cluster` (`start_cluster`), `node_kills` worker nodes between them; then run the checks. Uses the Ray
    already initialised in this process, or starts an embedded one."""
    import ray

    from levelray.deploy.report.runs import read_records
    from levelray.deploy.rundir import RunDir, load_checkpoint
    from levelray.deploy.training.driver import run, train
    from levelray.deploy.training.ray_backend import RayJob

    cfg = chaos_config(str(run_dir), snapshot_interval_s=snapshot_interval_s, checkpoint_interval=checkpoint_interval)
    rd = RunDir.start(run_dir)
    rd.write_config(cfg)
    job = RayJob.start(cfg, rd)
    owns_ray = job.started_ray
    job.started_ray = False  # keep Ray up for the resume below; shut down at the end if it is ours
    stop = threading.Event()
    failure: list[BaseException] = []

    def drive():
        try:
            run(cfg, rd, job, stop=stop)
        except BaseException as exc:  # reported below
            failure.append(exc)

    driver = threading.Thread(target=drive, name="chaos-driver", daemon=True)
    rng = random.Random(seed)
    events: list[dict[str, Any]] = []
    start = time.time()
    driver.start()
    watch = ServiceWatch(job)
    try:
        gap = (seconds - warmup_s) / max(1, kills)
        node_gap = (seconds - warmup_s) / max(1, node_kills)
        plan = sorted([(start + warmup_s + i * gap + rng.uniform(0, 0.3 * gap), "process", i) for i in range(kills)]
                      + [(start + warmup_s + (i + 0.5) * node_gap, "node", i) for i in range(node_kills)])
        for due, what, i in plan:
            while time.time() < due and driver.is_alive():
                time.sleep(0.2)
            if not driver.is_alive():
                break
            if what == "node":
                event = {"t_s": round(time.time() - start, 1), **kill_node(cluster, job, i, rng)}
                events.append(event)
                log(f"chaos: {event}")
                continue
            kind = KINDS[i % len(KINDS)]
            pid, what = _victim(job, kind, rng)
            event: dict[str, Any] = {"t_s": round(time.time() - start, 1), "kind": kind, "victim": what, "pid": pid}
            if pid is not None:
                if kind in SNAPSHOT_FILES:
                    snap = rd.path / "services" / SNAPSHOT_FILES[kind]
                    age = time.time() - snap.stat().st_mtime if snap.exists() else None
                    event["snapshot_file_age_s"] = None if age is None else round(age, 2)
                killed_at = time.time()
                os.kill(pid, signal.SIGKILL)
                if kind in SNAPSHOT_FILES:
                    event.update(watch.restored(kind, killed_at))
            events.append(event)
            log(f"chaos: {event}")
        while time.time() < start + seconds and driver.is_alive():
            time.sleep(0.5)
    finally:
        watch.close()
        stop.set()
        driver.join(timeout=300)
    if failure:
        raise RuntimeError(f"the job failed under chaos: {failure[0]!r}") from failure[0]

    records = read_records(rd.path)
    backwards = {key: sum(1 for a, b in zip(records[:-1], records[1:], strict=True) if b[key] < a[key])
                 for key in COUNTERS}
    checkpoints, unloadable = RunDir(run_dir).list_checkpoints(), []
    for path in checkpoints:
        try:
            load_checkpoint(path)
        except Exception as exc:  # reported, not raised: the check says how many
            unloadable.append(f"{path.name}: {exc}")
    resumed = _resume(cfg, run_dir, records[-1]["env_steps"] + resume_steps, train)
    if owns_ray:
        ray.shutdown()

    killed = [e for e in events if e["pid"] is not None]
    node_events = [e for e in events if e["kind"] == "node"]
    first_kill = min((e["t_s"] for e in killed), default=0.0)
    returns = [(r["elapsed_s"], r["episode_return_mean"]) for r in records if r.get("episode_return_mean") is not None]
    first_return = returns[0][1] if returns else None
    best_after = max((v for t, v in returns if t >= first_kill), default=None)
    service_kills = [e for e in killed if e["kind"] in SNAPSHOT_FILES]
    ages = [e["content_age_s"] for e in service_kills if e.get("content_age_s") is not None]
    return {
        "seconds": seconds,
        "kills": len(killed),
        "kills_by_kind": {k: sum(1 for e in killed if e["kind"] == k) for k in KINDS},
        "node_kills": len(node_events),
        "max_node_recovery_s": max((e["recovered_s"] for e in node_events if e["recovered_s"] is not None),
                                   default=None),
        "events": events,
        "records": len(records),
        "env_steps": records[-1]["env_steps"],
        "learner_restarts": records[-1].get("learner_restarts"),
        "actor_restarts": records[-1].get("actor_restarts"),
        "counters_stepping_back": backwards,
        "checkpoints": len(checkpoints),
        "unloadable_checkpoints": unloadable,
        "resumed": resumed,
        "max_content_age_s": max(ages, default=None),
        "max_snapshot_file_age_s": max((e["snapshot_file_age_s"] for e in service_kills
                                        if e.get("snapshot_file_age_s") is not None), default=None),
        "snapshot_interval_s": snapshot_interval_s,
        "services_restored_from_snapshot": all(e.get("restored_from_snapshot") for e in service_kills),
        "first_return": first_return,
        "best_return_after_first_kill": best_after,
        "checks": {
            "counters_monotone": not any(backwards.values()),
            "checkpoints_loadable": bool(checkpoints) and not unloadable,
            "resumable": resumed["ok"],
            # what a restarted service lost is at most one interval of its calls (+1 s: the counters are
            # sampled every 0.5 s, and the snapshot is written by the first call after the interval)
            "services_lost_at_most_one_snapshot_interval": (
                len(ages) == len(service_kills)
                and all(a <= snapshot_interval_s + 1.0 for a in ages)
                and all(e.get("restored_from_snapshot") for e in service_kills)),
            "training_improved": first_return is not None and best_after is not None and best_after > first_return,
            "nodes_recovered": all(e["recovered_s"] is not None for e in node_events),
        },
    }


def _resume(cfg, run_dir, total_steps: int, train) -> dict[str, Any]:
    """`levelray train --resume RUN_DIR --total-steps N`, in this process."""
    from levelray.contracts.config import replace_path
    from levelray.deploy.rundir import RunDir

    cfg = replace_path(cfg, "total_steps", int(total_steps))
    try:
        record = train(cfg, RunDir.start(run_dir, resume=True), resume=True, quiet=True)
    except Exception as exc:  # the check reports it
        return {"ok": False, "error": repr(exc)}
    return {"ok": record["env_steps"] >= total_steps, "env_steps": record["env_steps"],
            "learner_version": record["learner_version"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--kills", type=int, default=24)
    parser.add_argument("--node-kills", type=int, default=0,
                        help="worker nodes removed (on a simulated cluster of several nodes on this machine)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--snapshot-interval", type=float, default=5.0)
    parser.add_argument("--run-dir", default=None, help="default: a new temporary directory")
    parser.add_argument("--json", default="benchmarks/results/chaos.json")
    args = parser.parse_args()
    run_dir = args.run_dir or str(Path(tempfile.mkdtemp(prefix="levelray-chaos-")) / "run")
    cluster = start_cluster() if args.node_kills else None
    try:
        out = run_chaos(run_dir, seconds=args.minutes * 60, kills=args.kills, seed=args.seed,
                        snapshot_interval_s=args.snapshot_interval, node_kills=args.node_kills, cluster=cluster)
    finally:
        if cluster is not None:
            import ray

            ray.shutdown()
            cluster.shutdown()
    print_table(out["events"], [("t_s", "t s"), "kind", "victim", ("snapshot_file_age_s", "snapshot file age s"),
                                ("content_age_s", "restored content age s"),
                                ("restored_from_snapshot", "restored"), ("recovered_s", "node: recovered s")],
                title="kills")
    print_table([{"check": k, "passed": v} for k, v in out["checks"].items()], ["check", "passed"], title="checks")
    print(f"{out['kills']} kills {out['kills_by_kind']} and {out['node_kills']} node kills (recovered within "
          f"{out['max_node_recovery_s']} s) in {args.minutes:g} min; {out['env_steps']:,} env steps; "
          f"learner restarts {out['learner_restarts']}, actor restarts {out['actor_restarts']}; "
          f"{out['checkpoints']} checkpoints; restored service state at most {out['max_content_age_s']} s old "
          f"(interval {out['snapshot_interval_s']:g} s); return {out['first_return']} at the first report, best "
          f"{out['best_return_after_first_kill']} after the first kill; resumed: {out['resumed']}")
    write_json(args.json, {k: v for k, v in out.items()}, benchmark="chaos")
    raise SystemExit(0 if all(out["checks"].values()) else 1)


if __name__ == "__main__":
    main()

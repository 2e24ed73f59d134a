"""Run by tests/test_reliability.py in a child process: a Ray cluster of several nodes on this machine
(`ray.cluster_utils.Cluster`: a head with no CPU for work, worker nodes with their own raylets and object stores), a
levelray job on it, and nodes removed and added while it trains.

1. The env actors are spread over the worker nodes (`scheduling_strategy="SPREAD"`, `deploy.cluster.supervisor`).
2. A worker node holding an actor but not the learner is removed: its actors come back on the other node and
   training goes on.
3. A node is added and `scale` asks for three more actors than the old node has room for: the new node takes
   some (Ray's SPREAD is best effort, so which ones is not fixed; the old node's room is), then back to two.
4. After a checkpoint, the node holding the learner (and actors) is removed: the learner restarts from the
   checkpoint on the surviving node, the actors follow it, the counters never step back, and training goes on.
5. A second job places its level and replay services on worker nodes (`service_resources`; the nodes of one
   machine share its disk, as nodes that mount the run directory do): their node is removed, Ray restarts them on
   the other node, they come back from their snapshots, and training goes on.

6. `levelray train --address <the cluster>`, a driver process of its own, runs a short job on it to the end.

Prints CLUSTER OK when all six held."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import ray
from ray.cluster_utils import Cluster
from support import wait_for  # tests/ is this script's directory

from levelray.contracts.config import RunConfig, replace_paths
from levelray.deploy.rundir import RunDir
from levelray.deploy.training.driver import write_checkpoint
from levelray.deploy.training.ray_backend import RayJob

NODE = {"num_cpus": 4, "object_store_memory": 100 * 1024 * 1024}
COUNTERS = ("env_steps", "episodes", "learner_version", "samples_trained", "unrolls_received")


def actor_nodes(job) -> list[str]:
    return [a["node"] for a in ray.get(job.supervisor.status.remote())["actors"] if a.get("node")]


def main(run_dir: str) -> None:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "object_store_memory": NODE[
        "object_store_memory"]})
    workers = [cluster.add_node(**NODE) for _ in range(2)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace="levelray", log_to_driver=False)
    cfg = replace_paths(RunConfig(), {"env.id": "CartPole-v1", "env.num_levels": 20, "actors.num_actors": 2,
                                      "actors.envs_per_actor": 4, "metrics_port": 0, "run_dir": run_dir,
                                      "max_learner_restarts": 3})
    job = RayJob(cfg, RunDir(run_dir))
    try:
        wait_for(lambda: job.poll()["learner"]["learner_version"] >= 3, 120, "first updates")
        nodes = wait_for(lambda: len(n := actor_nodes(job)) == 2 and n, 60, "both actors started")
        assert len(set(nodes)) == 2, f"1. the actors were not spread over the nodes: {nodes}"
        print(f"1. actors on {sorted(n[:8] for n in nodes)}", flush=True)

        learner_node = job.poll()["learner"]["node"]
        victim = next(w for w in workers if w.node_id != learner_node)
        cluster.remove_node(victim, allow_graceful=False)
        nodes = wait_for(lambda: len(n := actor_nodes(job)) == 2 and victim.node_id not in n and n, 120,
                         "2. the lost actor back on the surviving node")
        version = job.poll()["learner"]["learner_version"]
        wait_for(lambda: job.poll()["learner"]["learner_version"] > version + 3, 90, "2. training after the loss")
        print(f"2. node {victim.node_id[:8]} removed; actors on {sorted(n[:8] for n in nodes)}", flush=True)

        added = cluster.add_node(**NODE)
        cluster.wait_for_nodes()
        ray.get(job.supervisor.scale.remote(5), timeout=60)  # the old node has room for one more (4 CPUs)
        nodes = wait_for(lambda: len(n := actor_nodes(job)) == 5 and n, 120, "3. five actors started")
        assert added.node_id in nodes, f"3. no actor on the added node {added.node_id[:8]}: {nodes}"
        print(f"3. node {added.node_id[:8]} added; actors on {sorted(n[:8] for n in nodes)}", flush=True)
        ray.get(job.supervisor.scale.remote(2), timeout=60)
        wait_for(lambda: len(actor_nodes(job)) == 2, 60, "3. back to two actors")

        saved = write_checkpoint(job, job.run_dir, cfg)
        before = job.poll()["learner"]
        doomed = next(w for w in workers if w.node_id == learner_node)
        cluster.remove_node(doomed, allow_graceful=False)
        after = wait_for(lambda: (s := job.poll())["learner_restarts"] == 1 and s, 120, "4. learner restarted")
        learner = after["learner"]
        assert learner["node"] == added.node_id, (learner["node"], added.node_id)
        for key in COUNTERS:
            assert learner[key] >= before[key], (key, learner[key], before[key])
        wait_for(lambda: job.poll()["learner"]["learner_version"] > max(saved, before["learner_version"]) + 3, 120,
                 "4. training after the learner's node was lost")
        wait_for(lambda: (n := actor_nodes(job)) and len(n) == 2 and set(n) == {added.node_id}, 120,
                 "4. the actors back, all on the surviving node", detail=lambda: str(actor_nodes(job)))
        print(f"4. learner's node {doomed.node_id[:8]} removed; learner back on {added.node_id[:8]} from the "
              f"checkpoint at version {saved}", flush=True)
    finally:
        job.stop()
        job.kill()
    try:
        services_node_lost(cluster, run_dir + "-services")
        train_through_address(cluster, run_dir + "-cli")
        print("CLUSTER OK", flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()


def _node_of(handle) -> str:
    return ray.get(handle.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id()), timeout=60)


def services_node_lost(cluster: Cluster, run_dir: str) -> None:
    """5.: services on worker nodes with the `levelray_services` resource (each service asks for 1; a node has 2,
    so the survivor can take both); the node holding the level service is removed."""
    nodes = [cluster.add_node(**NODE, resources={"levelray_services": 2}) for _ in range(2)]  # both services fit
    cluster.wait_for_nodes()
    cfg = replace_paths(RunConfig(), {"env.id": "CartPole-v1", "env.num_levels": 20, "actors.num_actors": 2,
                                      "actors.envs_per_actor": 4, "metrics_port": 0, "run_dir": run_dir,
                                      "replay.replay_ratio": 0.25, "levels.snapshot_interval_s": 0.5,
                                      "replay.snapshot_interval_s": 0.5, "service_resources": "levelray_services=1"})
    job = RayJob(cfg, RunDir(run_dir))
    try:
        wait_for(lambda: job.poll()["learner"]["learner_version"] >= 10, 120, "5. first updates")
        where = _node_of(job.level_service)
        assert where in {n.node_id for n in nodes}, f"5. the level service is not on a services node: {where}"
        doomed = next(n for n in nodes if n.node_id == where)
        cluster.remove_node(doomed, allow_graceful=False)
        stats = wait_for(lambda: _restarted(job.level_service, where), 120, "5. the level service back elsewhere")
        assert stats["restored_from_snapshot"], stats
        version = job.poll()["learner"]["learner_version"]
        wait_for(lambda: job.poll()["learner"]["learner_version"] > version + 5, 120, "5. training goes on")
        print(f"5. services' node {where[:8]} removed; the level service back on {_node_of(job.level_service)[:8]} "
              f"from its snapshot", flush=True)
    finally:
        job.stop()
        job.kill()


def train_through_address(cluster: Cluster, run_dir: str) -> None:
    """6.: the command line joins the cluster (`--address`) from a process of its own and trains to its budget."""
    cmd = [sys.executable, "-m", "levelray.deploy.cli", "train", "--address", cluster.address, "--env", "CartPole-v1",
           "--num-levels", "20", "--num-actors", "2", "--envs-per-actor", "4", "--total-steps", "20000",
           "--metrics-port", "0", "--quiet", "--tensorboard", "false", "--run-dir", run_dir]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    last = json.loads(Path(run_dir, "metrics.jsonl").read_text().splitlines()[-1])
    assert last["env_steps"] >= 20000, last["env_steps"]
    print(f"6. levelray train --address {cluster.address}: {last['env_steps']:,} env steps", flush=True)


def _restarted(handle, old_node: str) -> dict | None:
    """The service's stats once it answers from a node other than `old_node` (None before)."""
    try:
        if _node_of(handle) == old_node:
            return None
        return ray.get(handle.stats.remote(), timeout=10)
    except ray.exceptions.RayError:
        return None


if __name__ == "__main__":
    main(sys.argv[1])

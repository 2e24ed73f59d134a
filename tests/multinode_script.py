"""Run by tests/test_reliability.py in a child process: a three-node Ray cluster on this machine
(`ray.cluster_utils.Cluster`), a levelray job on it, and one worker node removed mid-run.

Prints MULTINODE OK when the env actors that were on the removed node came back on the others
and training went on."""

from __future__ import annotations

import sys

import ray
from ray.cluster_utils import Cluster
from support import wait_for  # tests/ is this script's directory

from levelray.contracts.config import RunConfig, replace_paths
from levelray.deploy.ray_backend import RayJob
from levelray.deploy.rundir import RunDir


def main(run_dir: str) -> None:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    workers = [cluster.add_node(num_cpus=2) for _ in range(2)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace="levelray", log_to_driver=False)
    cfg = replace_paths(RunConfig(), {"env.id": "CartPole-v1", "env.num_levels": 20, "actors.num_actors": 2,
                                      "actors.envs_per_actor": 4, "metrics_port": 0, "run_dir": run_dir})
    job = RayJob(cfg, RunDir(run_dir))
    try:
        wait_for(lambda: job.poll()["learner"]["learner_version"] >= 3, 120)
        status = ray.get(job.supervisor.status.remote())
        learner_node = job.poll()["learner"]["node"]
        actor_nodes = {a["node"] for a in status["actors"]}
        victim = next((w for w in workers if w.node_id in actor_nodes and w.node_id != learner_node), None)
        if victim is None:
            raise SystemExit(f"no worker node holds actors without the learner: {actor_nodes} {learner_node}")
        lost = [a["id"] for a in status["actors"] if a["node"] == victim.node_id]
        print(f"removing node {victim.node_id[:8]} with actors {lost}", flush=True)
        cluster.remove_node(victim)
        status = wait_for(lambda: (s := ray.get(job.supervisor.status.remote()))["actors_alive"] == 2
                          and s["actor_restarts"] >= len(lost) and s, 90)
        nodes_now = {a["node"] for a in status["actors"]}
        assert victim.node_id not in nodes_now, nodes_now
        version = job.poll()["learner"]["learner_version"]
        wait_for(lambda: job.poll()["learner"]["learner_version"] > version + 3, 90)
        print(f"actors back on {sorted(n[:8] for n in nodes_now)}; restarts {status['actor_restarts']}")
        print("MULTINODE OK", flush=True)
    finally:
        job.stop()
        job.kill()
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])

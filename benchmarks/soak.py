"""Soak test: train for a long time and watch every process's memory and the Ray object store.

    python -m benchmarks.soak [--minutes 30] [--warmup-fraction 0.2] [--env procgen:bigfish] [--json PATH]

Runs the main job's configuration (PLR on procgen by default, 2 actors x 16 envs, periodic
checkpoints) on an embedded local Ray, driven in-process like `levelray train`. Every
`--sample-s` seconds it records the RSS of every process in the job's process tree (driver, GCS,
raylet, learner, env actors, services, ...; read from /proc) and the object store's usage
(bytes and object count, from Ray's memory summary). After the warm-up it compares the end of the
run with the start of the measured window: the target is less than 5% growth (per process role
and in total) and an object count that does not grow (no leaked objects).
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from benchmarks.common import print_table, write_json

PAGE = os.sysconf("SC_PAGE_SIZE")
COLUMNS = [
    ("role", "process"),
    ("processes", "n"),
    ("rss_start_mib", "RSS after warm-up MiB"),
    ("rss_end_mib", "RSS at end MiB"),
    ("growth_pct", "growth %"),
]


def _children(pid: int) -> list[int]:
    out = []
    task_dir = Path(f"/proc/{pid}/task")
    try:
        for task in task_dir.iterdir():
            text = (task / "children").read_text().split()
            out.extend(int(c) for c in text)
    except OSError:
        pass
    return out


def process_tree(root: int) -> list[int]:
    seen, stack = [], [root]
    while stack:
        pid = stack.pop()
        seen.append(pid)
        stack.extend(_children(pid))
    return seen


def role(pid: int) -> str:
    """A stable name for a process: Ray sets titles like `ray::EnvActor.run`."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "gone"
    if pid == os.getpid():
        return "driver"
    m = re.match(r"ray::(\w+)", cmd)
    if m:
        return m.group(1)
    for name in ("gcs_server", "raylet", "dashboard", "log_monitor", "runtime_env", "monitor.py", "agent"):
        if name in cmd:
            return name
    return Path(cmd.split()[0]).name if cmd else "unknown"


def rss_bytes(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def object_store() -> tuple[float, int]:
    """(MiB used, object count) from Ray's memory summary (an internal API: text parsed here)."""
    from ray._private.internal_api import memory_summary

    text = memory_summary(stats_only=True)
    m = re.search(r"Plasma memory usage (\d+) MiB, (\d+) objects", text)
    return (float(m.group(1)), int(m.group(2))) if m else (float("nan"), -1)


def sample() -> dict:
    by_role: dict[str, int] = defaultdict(int)
    count: dict[str, int] = defaultdict(int)
    for pid in process_tree(os.getpid()):
        r = role(pid)
        by_role[r] += rss_bytes(pid)
        count[r] += 1
    mib, objects = object_store()
    return {"time": time.time(), "rss": dict(by_role), "processes": dict(count), "object_store_mib": mib,
            "objects": objects}


def growth(a: float, b: float) -> float:
    return (b - a) / a if a > 0 else 0.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--warmup-fraction", type=float, default=0.2)
    parser.add_argument("--sample-s", type=float, default=10.0)
    parser.add_argument("--env", default="procgen:bigfish")
    parser.add_argument("--num-actors", type=int, default=2)
    parser.add_argument("--envs-per-actor", type=int, default=16)
    parser.add_argument("--json", default="benchmarks/out/soak.json")
    parser.add_argument("--analyze", metavar="JSON", help="only re-analyse the samples of an earlier run")
    args = parser.parse_args()
    if args.analyze:
        import json

        data = json.loads(Path(args.analyze).read_text())["results"]
        samples = data["samples"]
        start = data.get("start", samples[0]["time"] - 10.0)
        report(samples, start, data["minutes"], args.warmup_fraction, data["env"], args.json)
        return

    from levelray.contracts.config import RunConfig, replace_paths
    from levelray.deploy.cluster.ray_cluster import init_ray
    from levelray.deploy.rundir import RunDir
    from levelray.deploy.training.driver import build_record, write_checkpoint
    from levelray.deploy.training.ray_backend import RayJob

    values = {"env.id": args.env}
    if not args.env.startswith("procgen:"):
        values |= {"env.num_levels": 200,
                   "learner.learning_rate": 1e-3}  # 2e-3 sometimes collapses the policy at ~3 versions of lag
    run_dir = RunDir(tempfile.mkdtemp(prefix="levelray-soak-"))
    cfg = replace_paths(RunConfig(), {
        **values, "actors.num_actors": args.num_actors, "actors.envs_per_actor": args.envs_per_actor,
        "checkpoint_interval_updates": 50, "metrics_port": 0, "run_dir": str(run_dir.path),
    })
    job = RayJob(cfg, run_dir, embedded=init_ray(None, cfg.actors.num_actors))
    samples, records = [], []
    start = time.time()
    end = start + args.minutes * 60
    try:
        next_checkpoint_version = cfg.checkpoint_interval_updates
        while time.time() < end:
            time.sleep(args.sample_s)
            snap = job.poll()
            records.append(build_record(snap, steps_per_second=0.0, elapsed_s=time.time() - start))
            if records[-1]["learner_version"] >= next_checkpoint_version:
                write_checkpoint(job, run_dir, cfg)
                next_checkpoint_version += cfg.checkpoint_interval_updates
            s = sample()
            s["env_steps"] = records[-1]["env_steps"]
            s["learner_version"] = records[-1]["learner_version"]
            samples.append(s)
            rss_mib = sum(s["rss"].values()) / 2**20
            print(f"{(s['time'] - start) / 60:6.1f} min  steps {s['env_steps']:>9,}  rss {rss_mib:8.1f} MiB  "
                  f"store {s['object_store_mib']:.0f} MiB / {s['objects']} objects", flush=True)
    finally:
        job.stop()
        job.kill()
    report(samples, start, args.minutes, args.warmup_fraction, args.env, args.json)


def _window_median(samples: list[dict], key: str) -> float:
    return float(np.median([s["rss"].get(key, 0) if key != "TOTAL" else sum(s["rss"].values()) for s in samples]))


def report(samples: list[dict], start: float, minutes: float, warmup_fraction: float, env: str, json_path: str) -> bool:
    """Growth after warm-up, per process role: the median RSS over the last fifth of the measured
    window against the median over its first fifth (single samples jump by hundreds of MiB as
    shared object-store pages are mapped in and out)."""
    warm = [s for s in samples if s["time"] - start >= warmup_fraction * minutes * 60]
    n = max(1, len(warm) // 5)
    head, tail = warm[:n], warm[-n:]
    roles = sorted(set(head[0]["rss"]) & set(tail[-1]["rss"]))
    results = []
    for r in [*roles, "TOTAL"]:
        a, b = _window_median(head, r), _window_median(tail, r)
        procs = sum(head[0]["processes"].values()) if r == "TOTAL" else head[0]["processes"][r]
        results.append({"role": r, "processes": procs, "rss_start_mib": a / 2**20, "rss_end_mib": b / 2**20,
                        "growth_pct": 100 * growth(a, b)})
    print_table(results, COLUMNS)
    first, last = warm[0], warm[-1]
    print(f"medians over the first and last {n} samples ({n * (warm[1]['time'] - warm[0]['time']):.0f} s each) "
          f"of the {(last['time'] - first['time']) / 60:.1f} min after warm-up")
    print(f"object store: {first['object_store_mib']:.0f} MiB / {first['objects']} objects after warm-up, "
          f"{last['object_store_mib']:.0f} MiB / {last['objects']} objects at end; "
          f"max objects {max(s['objects'] for s in warm)}")
    # Objects in flight (unrolls, weights) fluctuate from sample to sample; a leak is a trend.
    t = np.array([s["time"] for s in warm]) - warm[0]["time"]
    n_obj = np.array([s["objects"] for s in warm], dtype=float)
    slope = float(np.polyfit(t, n_obj, 1)[0]) if len(warm) > 2 and t[-1] > 0 else 0.0
    object_trend = slope * (t[-1] if len(t) else 0.0)
    leak = object_trend > max(10.0, 0.5 * float(n_obj.mean()))
    print(f"object count trend over the measured window: {object_trend:+.1f} objects "
          f"(mean {n_obj.mean():.1f}); leak: {'yes' if leak else 'no'}")
    print(f"env steps {samples[-1]['env_steps']:,} in {minutes:.0f} min; learner version "
          f"{samples[-1]['learner_version']}")
    total_growth = results[-1]["growth_pct"]
    ok = total_growth < 5.0 and not leak
    print("target (<5% RSS growth after warm-up, no object growth):", "MET" if ok else "NOT MET")
    data = {"minutes": minutes, "env": env, "per_role": results, "total_growth_pct": total_growth,
            "object_trend": object_trend, "samples": samples, "start": start, "target_met": ok}
    write_json(json_path, {"results": data}, benchmark="soak")
    return ok

if __name__ == "__main__":
    main()

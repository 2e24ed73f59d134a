"""What averaging gradients over several learners costs: one all-reduce of each network's gradient, 2 ranks, gloo.

    python -m benchmarks.bench_allreduce [--ranks 2] [--repeats 50] [--threads 1] [--json PATH]

Several learners training one policy (data parallelism, as DDP) add one step to every update: the ranks'
gradients are summed (all-reduce) and divided by the number of ranks, then every rank applies the same optimiser
step. This times that step alone for the three networks levelray trains (`bench_learner`'s `CASES`): each rank is
a process (torch.multiprocessing, a `FileStore` rendezvous in a temporary folder: no port), holds the network's
gradient as one flat float32 tensor (DDP's buckets are flat tensors of the same total size), and runs
`dist.all_reduce` `--repeats` times after 5 warm-up calls. Reported per network: parameters, megabytes
all-reduced per update, and the median and 90th percentile all-reduce time over rank 0's calls.

Beside the update time of one learner (`bench_learner`, whose times RESULTS.md's bf16 section lists; pass it with
`--update-ms impala_cnn=789,...` to get the column), the all-reduce's share of an update with N learners is
`allreduce / (update + allreduce)`: the expected data-parallel efficiency on CPUs where each learner has cores of
its own. On one 2-core machine both ranks share the same cores, so this measures gloo's cost here, not a speed-up.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from benchmarks.bench_learner import CASES
from benchmarks.common import print_table, write_json
from levelray.learner.data_parallel import init_group
from levelray.policy.models import build_model

WARMUP = 5


def _rank_main(rank: int, ranks: int, store_path: str, repeats: int, threads: int, out: dict) -> None:
    """One rank: join the group, all-reduce each network's flat gradient `repeats` times; rank 0 reports."""
    torch.set_num_threads(threads)
    store = dist.FileStore(store_path, ranks)
    init_group(rank, ranks, store)
    try:
        for name, spec in CASES.items():
            model = build_model(spec, name)
            numel = sum(p.numel() for p in model.parameters())
            grad = torch.randn(numel, dtype=torch.float32)
            times = []
            for i in range(WARMUP + repeats):
                dist.barrier()  # each call timed from a common start: the slower rank's lateness is not counted
                start = time.perf_counter()
                dist.all_reduce(grad)
                grad.div_(ranks)
                if i >= WARMUP:
                    times.append(time.perf_counter() - start)
            if rank == 0:
                times.sort()
                out[name] = {"params": numel, "megabytes": numel * 4 / 1e6,
                             "median_ms": 1e3 * statistics.median(times),
                             "p90_ms": 1e3 * times[int(0.9 * (len(times) - 1))]}
    finally:
        dist.destroy_process_group()


def measure(ranks: int, repeats: int, threads: int) -> dict:
    """{network: {params, megabytes, median_ms, p90_ms}} from rank 0 of `ranks` gloo processes."""
    with tempfile.TemporaryDirectory() as tmp, mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_rank_main, args=(ranks, os.path.join(tmp, "store"), repeats, threads, out), nprocs=ranks)
        return dict(out)


def _update_ms(text: str) -> dict[str, float]:
    pairs = [item.split("=") for item in text.split(",") if item.strip()]
    bad = [p for p in pairs if len(p) != 2 or p[0] not in CASES]
    if bad:
        raise SystemExit(f"--update-ms: expected NETWORK=MS pairs with NETWORK in {', '.join(CASES)}, got {text!r}")
    return {name: float(ms) for name, ms in pairs}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--repeats", type=int, default=50)
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--update-ms", default="", help="one learner's update time per network, e.g. impala_cnn=789")
    p.add_argument("--json", default="benchmarks/out/bench_allreduce.json")
    args = p.parse_args(argv)
    update_ms = _update_ms(args.update_ms)
    results = measure(args.ranks, args.repeats, args.threads)
    rows = []
    for name, r in results.items():
        update = update_ms.get(name)
        share = None if update is None else r["median_ms"] / (update + r["median_ms"])
        rows.append({"network": name, **r, "update_ms": update, "allreduce_share": share})
    print(f"\nall-reduce of one update's gradient, gloo, {args.ranks} ranks on this machine, "
          f"{args.threads} torch thread(s) each, {args.repeats} calls")
    print_table(rows, ["network", "params", ("megabytes", "MB"), ("median_ms", "median ms"), ("p90_ms", "p90 ms"),
                       ("update_ms", "update ms (given)"), ("allreduce_share", "share of update")])
    write_json(args.json, {"ranks": args.ranks, "threads": args.threads, "repeats": args.repeats, "rows": rows},
               benchmark="bench_allreduce")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

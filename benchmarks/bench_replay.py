"""Benchmark: prioritized replay sample(256) + update_priorities(256).

Compares ``replay_service.PrioritizedReplay`` (B-ary sum/min tree: C kernels when the optional
extension ``replay_service._sumtree_c`` is built, else NumPy; the ``backend`` column says which ran,
``LEVELRAY_NO_C_EXT=1`` forces NumPy) with
(a) the per-element Python segment tree of the PER tutorial (re-implemented below: list-backed
    sum and min segment trees, one ``retrieve`` per stratum, one ``__setitem__`` per update;
    its ``sum()``/``min()`` read the root, which is kinder to it than the tutorial's recursive
    range query), and
(b) cpprb's C++ ``PrioritizedReplayBuffer`` (skipped with a note if cpprb is not installed).

Items are tiny (None / one float) so the tree is measured, not payload copying. Each timing is the
best of ``--repeats`` runs of ``--iters`` sample+update pairs at a full buffer; µs per pair.

    .venv/bin/python -m benchmarks.bench_replay [--quick] [--json benchmarks/out/bench_replay.json]
"""

from __future__ import annotations

import argparse
import platform
import random
import time

import numpy as np

from benchmarks.common import print_table, write_json
from levelray.replay_service import PrioritizedReplay
from levelray.replay_service import sumtree as _sumtree

BATCH = 256
ALPHA, EPS, BETA = 0.6, 1e-6, 0.4


def _optional(spec: str):
    return lambda x: "n/a" if x is None else format(x, spec)


COLUMNS = [
    ("log2_size", "size", lambda k: f"2^{k}"),
    ("backend", "backend"),
    ("ours_us", "ours µs", _optional(".1f")),
    ("python_tree_us", "python µs", _optional(".1f")),
    ("cpprb_us", "cpprb µs", _optional(".1f")),
    ("speedup_vs_python", "x python", _optional(".1f")),
    ("speedup_vs_cpprb", "x cpprb", _optional(".2f")),
]


# ----------------------------------------------------------------------------- (a) Python tree
class _PySegmentTree:
    """Per-element binary segment tree on a Python list (as in the PER tutorial)."""

    def __init__(self, capacity: int, op, neutral: float) -> None:
        assert capacity > 0 and capacity & (capacity - 1) == 0
        self.capacity, self.op = capacity, op
        self.tree = [neutral] * (2 * capacity)

    def bulk_init(self, values) -> None:  # O(n) fill, only to set the benchmark up quickly
        cap, t, op = self.capacity, self.tree, self.op
        t[cap : cap + len(values)] = list(map(float, values))
        for i in range(cap - 1, 0, -1):
            t[i] = op(t[2 * i], t[2 * i + 1])

    def __setitem__(self, idx: int, val: float) -> None:
        idx += self.capacity
        t, op = self.tree, self.op
        t[idx] = val
        idx //= 2
        while idx >= 1:
            t[idx] = op(t[2 * idx], t[2 * idx + 1])
            idx //= 2

    def __getitem__(self, idx: int) -> float:
        return self.tree[self.capacity + idx]

    def root(self) -> float:
        return self.tree[1]


class _PySumTree(_PySegmentTree):
    def __init__(self, capacity: int) -> None:
        super().__init__(capacity, lambda a, b: a + b, 0.0)

    def retrieve(self, upperbound: float) -> int:
        idx, t, cap = 1, self.tree, self.capacity
        while idx < cap:
            left = 2 * idx
            if t[left] > upperbound:
                idx = left
            else:
                upperbound -= t[left]
                idx = left + 1
        return idx - cap


class PythonTreePER:
    """The tutorial's PrioritizedReplayBuffer sampling/update logic over the Python trees."""

    def __init__(self, capacity: int, priorities: np.ndarray) -> None:
        self.size = capacity
        self.sum_tree = _PySumTree(capacity)
        self.min_tree = _PySegmentTree(capacity, min, float("inf"))
        leaves = (priorities + EPS) ** ALPHA
        self.sum_tree.bulk_init(leaves)
        self.min_tree.bulk_init(leaves)
        self.max_priority = 1.0

    def sample(self, batch_size: int, beta: float):
        total = self.sum_tree.root()
        segment = total / batch_size
        indices = []
        for i in range(batch_size):
            upperbound = random.uniform(segment * i, segment * (i + 1))
            indices.append(self.sum_tree.retrieve(upperbound))
        p_min = self.min_tree.root() / total
        max_weight = (p_min * self.size) ** (-beta)
        weights = [((self.sum_tree[i] / total) * self.size) ** (-beta) / max_weight for i in indices]
        return indices, np.array(weights)

    def update_priorities(self, indices, priorities) -> None:
        for idx, priority in zip(indices, priorities, strict=True):
            leaf = (priority + EPS) ** ALPHA
            self.sum_tree[idx] = leaf
            self.min_tree[idx] = leaf
            self.max_priority = max(self.max_priority, priority)


# ----------------------------------------------------------------------------- timing helpers
def _time_pairs(step, iters: int, repeats: int) -> float:
    for _ in range(max(3, iters // 10)):
        step()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iters):
            step()
        best = min(best, (time.perf_counter() - t0) / iters)
    return best * 1e6


def bench_ours(n: int, prios: np.ndarray, iters: int, repeats: int) -> tuple[float, str]:
    r = PrioritizedReplay(n, alpha=ALPHA, eps=EPS, rng=0)
    r.insert([None] * n, prios)
    rng = np.random.default_rng(1)
    new = np.abs(rng.normal(size=(64, BATCH)))
    k = [0]

    def step():
        s = r.sample(BATCH, BETA)
        r.update_priorities(s.ids, new[k[0] & 63])
        k[0] += 1

    return _time_pairs(step, iters, repeats), r.tree.backend


def bench_python(n: int, prios: np.ndarray, iters: int, repeats: int) -> float:
    random.seed(0)
    per = PythonTreePER(n, prios)
    rng = np.random.default_rng(1)
    new = np.abs(rng.normal(size=(64, BATCH))).tolist()
    k = [0]

    def step():
        idx, _ = per.sample(BATCH, BETA)
        per.update_priorities(idx, new[k[0] & 63])
        k[0] += 1

    return _time_pairs(step, iters, repeats)


def bench_cpprb(n: int, prios: np.ndarray, iters: int, repeats: int) -> float | None:
    try:
        from cpprb import PrioritizedReplayBuffer
    except Exception:  # not installed / incompatible build
        return None
    rb = PrioritizedReplayBuffer(n, {"done": {}}, alpha=ALPHA, eps=EPS)
    rb.add(done=np.zeros(n), priorities=prios)
    rng = np.random.default_rng(1)
    new = np.abs(rng.normal(size=(64, BATCH)))
    k = [0]

    def step():
        s = rb.sample(BATCH, beta=BETA)
        rb.update_priorities(s["indexes"], new[k[0] & 63])
        k[0] += 1

    return _time_pairs(step, iters, repeats)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer iterations (smoke run)")
    ap.add_argument("--json", default="benchmarks/out/bench_replay.json", help="where to write results")
    ap.add_argument("--sizes", default="16,18,20", help="log2 buffer sizes, comma separated")
    args = ap.parse_args(argv)
    iters, py_iters, repeats = (50, 5, 2) if args.quick else (400, 20, 5)
    try:
        import cpprb

        cpprb_version = getattr(cpprb, "__version__", "installed")
    except Exception as exc:
        cpprb_version = None
        print(f"cpprb unavailable ({type(exc).__name__}: {exc}); its column is skipped")
    rows = []
    for log2 in (int(x) for x in args.sizes.split(",")):
        n = 1 << log2
        prios = np.random.default_rng(log2).random(n) * 2
        ours, backend = bench_ours(n, prios, iters, repeats)
        py = bench_python(n, prios, py_iters, repeats)
        cpp = bench_cpprb(n, prios, iters, repeats) if cpprb_version else None
        rows.append(
            {
                "size": n,
                "log2_size": log2,
                "backend": backend,
                "ours_us": ours,
                "python_tree_us": py,
                "cpprb_us": cpp,
                "speedup_vs_python": py / ours,
                "speedup_vs_cpprb": None if cpp is None else cpp / ours,
            }
        )
    title = f"sample({BATCH}) + update_priorities({BATCH}), µs per pair (best of {repeats} x {iters} iters)"
    print_table(rows, COLUMNS, title=title)
    # write_json adds "benchmark", "date" and the "machine" block (platform.machine() is its "machine")
    result = {
        "batch_size": BATCH,
        "alpha": ALPHA,
        "beta": BETA,
        "quick": args.quick,
        "iters": iters,
        "python_iters": py_iters,
        "repeats": repeats,
        "numpy": np.__version__,
        "backend": _sumtree.BACKEND,
        "c_ext_error": _sumtree.C_EXT_ERROR,
        "cpprb": cpprb_version,
        "python": platform.python_version(),
        "rows": rows,
    }
    write_json(args.json, result, benchmark="replay sample+update")
    return result


if __name__ == "__main__":
    main()

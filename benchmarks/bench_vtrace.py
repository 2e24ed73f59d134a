"""V-trace on the CPU: levelray's `from_importance_weights` against a plain per-step PyTorch loop.

    python -m benchmarks.bench_vtrace [--json PATH] [--quick]

The baseline is the straightforward implementation most ports use: a Python loop over time that
recomputes clipped ratios and deltas step by step and collects results with torch.stack.
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.common import print_table, time_call, write_json
from levelray.learner.vtrace import from_importance_weights

COLUMNS = [
    ("T", "T"),
    ("B", "B"),
    ("levelray_us", "levelray µs"),
    ("per_step_loop_us", "per-step loop µs"),
    ("speedup", "speedup"),
]


@torch.no_grad()
def per_step_loop(log_rhos, discounts, rewards, values, bootstrap_value):
    T = values.shape[0]
    rhos = torch.exp(log_rhos)
    vs_minus_v = []
    acc = torch.zeros_like(bootstrap_value)
    for t in reversed(range(T)):
        next_v = values[t + 1] if t + 1 < T else bootstrap_value
        rho = torch.clamp(rhos[t], max=1.0)
        c = torch.clamp(rhos[t], max=1.0)
        delta = rho * (rewards[t] + discounts[t] * next_v - values[t])
        acc = delta + discounts[t] * c * acc
        vs_minus_v.append(acc)
    vs = torch.stack(vs_minus_v[::-1]) + values
    vs_next = torch.cat([vs[1:], bootstrap_value[None]])
    pg = torch.clamp(rhos, max=1.0) * (rewards + discounts * vs_next - values)
    return vs, pg


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", default="benchmarks/out/bench_vtrace.json")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    results = []
    for T in (20, 100):
        for B in (32, 256):
            inputs = (torch.randn(T, B), torch.full((T, B), 0.99), torch.randn(T, B), torch.randn(T, B), torch.randn(B))
            ours = time_call(lambda: from_importance_weights(*inputs), repeats=3 if args.quick else 7)  # noqa: B023
            base = time_call(lambda: per_step_loop(*inputs), repeats=3 if args.quick else 7)  # noqa: B023
            ref = per_step_loop(*inputs)
            got = from_importance_weights(*inputs)
            assert torch.allclose(ref[0], got.vs, rtol=1e-5, atol=1e-5)
            speedup = base["median_s"] / ours["median_s"]
            results.append({"T": T, "B": B, "levelray_us": ours["median_s"] * 1e6,
                            "per_step_loop_us": base["median_s"] * 1e6, "speedup": speedup})
    print_table(results, COLUMNS)
    write_json(args.json, {"results": results}, benchmark="bench_vtrace")


if __name__ == "__main__":
    main()

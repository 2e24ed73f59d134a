"""What the learner trains on under each curriculum: the trained share of env steps, and the learner's time per
trained step, at equal trained steps.

    python -m benchmarks.curriculum_share [--trained-steps 200000] [--rounds 2] [--arms dr,robust,accel]
        [--buffer-size 100] [--window 256] [--json PATH]

The arms are `benchmarks/sweeps/accel_maze.yaml`'s (domain randomisation, Robust PLR and ACCEL on `maze:13x13` at
DCD's settings), with a smaller buffer (`--buffer-size`, 100: filled to rho = 0.5 within the run) and the budget in
trained steps (`total_trained_steps`, as DCD compares at equal gradient updates). Each run is the inline backend
driven here (`InlineBackend.train_step` until the budget), one torch thread, the arms in rotated order per round.

Per run: the trained share over the whole run (`samples_trained / env_steps`) and after the buffer first reached rho
of its size (where replay begins; the share DCD's loop targets: p for Robust PLR, p/(1+p) for ACCEL, 1 for DR);
`learner_samples_received` against `samples_trained` (equal where explore unrolls stay on the actors); and the
learner's time per trained step: the wall time of `LearnerCore.train` calls (`time.perf_counter`, one thread)
over the steps trained. Under Robust PLR and ACCEL the learner receives only what it trains on, so that time
should match DR's.
"""

from __future__ import annotations

import argparse
import statistics
import time

from benchmarks.common import ROOT, fmt_ci, load_sweep, print_table, train_flags_config, write_json
from levelray.contracts.config import from_dict
from levelray.deploy.report.stats import ci_summary
from levelray.deploy.training.inline import InlineBackend
from levelray.policy.threads import use_threads


def arm_config(arm: str, args: argparse.Namespace, seed: int):
    """`accel_maze.yaml`'s base and arm, with this benchmark's buffer, window and budget."""
    spec = load_sweep("accel_maze")
    tree = train_flags_config(["--env", "maze:13x13", "--num-levels", "0", "--level-buffer-size",
                               str(args.buffer_size), "--level-window", str(args.window), "--seed", str(seed),
                               "--total-steps", str(50 * args.trained_steps),
                               "--total-trained-steps", str(args.trained_steps)])
    for section, values in spec["arms"][arm].items():
        tree.setdefault(section, {}).update(values)
    tree["levels"]["buffer_size"] = args.buffer_size
    return from_dict(tree)


def run_arm(arm: str, args: argparse.Namespace, seed: int) -> dict:
    backend = InlineBackend(arm_config(arm, args, seed))
    core, train = backend.core, backend.core.train
    seconds = [0.0]

    def timed_train(fresh):
        start = time.perf_counter()
        try:
            return train(fresh)
        finally:
            seconds[0] += time.perf_counter() - start

    core.train = timed_train
    rho_size = backend.cfg.levels.rho * backend.cfg.levels.buffer_size
    at_rho = None  # (env steps, trained steps) when the buffer first held rho of its size
    wall = time.perf_counter()
    while not core.budget_spent:
        backend.train_step()
        if at_rho is None and backend.levels is not None and backend.levels.stats()["levels_buffered"] >= rho_size:
            s = core.stats()
            at_rho = (s["env_steps"], s["samples_trained"])
    s = core.stats()
    backend.close()
    env_steps, trained = s["env_steps"], s["samples_trained"]
    after = None if at_rho is None else (trained - at_rho[1]) / max(env_steps - at_rho[0], 1)
    return {"arm": arm, "seed": seed, "env_steps": env_steps, "samples_trained": trained,
            "learner_samples_received": s.get("learner_samples_received"), "share": trained / env_steps,
            "share_after_rho": after, "learner_us_per_trained_step": 1e6 * seconds[0] / max(trained, 1),
            "wall_s": time.perf_counter() - wall}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trained-steps", type=int, default=200_000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--arms", default="dr,robust,accel")
    p.add_argument("--buffer-size", type=int, default=100)
    p.add_argument("--window", type=int, default=256)
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "out" / "curriculum_share.json"))
    args = p.parse_args()
    use_threads(1)
    arms = args.arms.split(",")
    results = []
    for r in range(args.rounds):
        for arm in arms[r % len(arms):] + arms[: r % len(arms)]:
            res = run_arm(arm, args, seed=r)
            print(f"round {r} {arm:7s} share {res['share']:.3f} (after rho {res['share_after_rho']}), received "
                  f"{res['learner_samples_received']:,} trained {res['samples_trained']:,}, learner "
                  f"{res['learner_us_per_trained_step']:.1f} us/trained step, {res['wall_s']:.0f} s", flush=True)
            results.append(res)
    rows = []
    for arm in arms:
        mine = [x for x in results if x["arm"] == arm]
        after = [x["share_after_rho"] for x in mine if x["share_after_rho"] is not None]
        rows.append({"arm": arm, "share": fmt_ci(ci_summary([x["share"] for x in mine])),
                     "after": f"{statistics.mean(after):.3f}" if after else "-",
                     "learner": fmt_ci(ci_summary([x["learner_us_per_trained_step"] for x in mine]), ".1f")})
    print_table(rows, [("arm", "arm"), ("share", "trained share, whole run"), ("after", "after rho filled"),
                       ("learner", "learner us / trained step")])
    write_json(args.json, {"results": results, "rows": rows}, benchmark="curriculum_share")


if __name__ == "__main__":
    main()

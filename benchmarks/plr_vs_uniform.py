"""PLR versus uniform level sampling, the PLR paper's generalisation protocol with levelray's IMPALA.

    python -m benchmarks.plr_vs_uniform [--total-steps 20000] [--quick] [--backend ray|inline]
                                        [--env procgen:bigfish] [--num-levels 200] [--seed 0]
                                        [--eval-episodes 32] [--eval-greedy] [--out-dir DIR] [--json PATH]
                                        [-- extra levelray train flags]

Protocol (Jiang et al., "Prioritized Level Replay", 2021): procgen easy mode, 200 training levels
(seeds 0-199), test on the full level distribution (random seeds outside the training range). Two runs with
the same budget, config and seed, differing only in `--level-strategy`: `random` (uniform over the 200
levels) and `value_l1` (PLR: rank transform, temperature 0.1, staleness 0.1: levelray's defaults). Each
run is a `levelray train` subprocess (its own local Ray with `--backend ray`, one process with `--backend
inline`: the lent GPU machines cannot install Ray), then `levelray evaluate RUN --levels train,test --json`
plays `--eval-episodes` episodes on training levels and on held-out levels with the final checkpoint.
`levelray report` draws both runs into `OUT/report/`.

The table puts the measured returns next to the paper's BigFish numbers (test return at 25M steps: 3.7
uniform, 10.9 PLR; the paper trains PPO, we train IMPALA/V-trace). At the CPU default of 20,000 env steps
(0.08% of the paper's budget) the agents have barely started learning: the numbers only show that the
pipeline runs end to end, not which strategy generalises better.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import print_table, write_json

ROOT = Path(__file__).resolve().parents[1]
_VENV_LEVELRAY = ROOT / ".venv" / "bin" / "levelray"
LEVELRAY = [str(_VENV_LEVELRAY)] if _VENV_LEVELRAY.exists() else [sys.executable, "-m", "levelray.deploy.cli"]
STRATEGIES = ("random", "value_l1")
# PLR paper (Jiang et al. 2021), Table 2, procgen easy, 200 training levels, 25M steps: mean test return
PAPER = {"procgen:bigfish": {"steps": 25_000_000, "random": 3.7, "value_l1": 10.9}}


def _run(cmd: list[str], log: Path, timeout: float | None = None) -> str:
    """Run a levelray command from the repo root; stdout+stderr go to `log`; returns stdout."""
    start = time.time()
    print(f"$ levelray {' '.join(cmd[len(LEVELRAY):])}", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    log.write_text(f"$ {' '.join(cmd)}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
        raise SystemExit(f"command failed (exit {proc.returncode}, log {log}):\n{tail}")
    print(f"  done in {time.time() - start:.0f} s", file=sys.stderr, flush=True)
    return proc.stdout


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--total-steps", type=int, default=None, help="env steps per run (default 20000; 4000 --quick)")
    p.add_argument("--quick", action="store_true", help="a smoke test: 4000 steps, 2 actors x 4 envs, 8 episodes")
    p.add_argument("--backend", choices=("ray", "inline"), default="ray")
    p.add_argument("--env", default="procgen:bigfish")
    p.add_argument("--num-levels", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-episodes", type=int, default=None, help="episodes per level set (default 32; 8 --quick)")
    p.add_argument("--eval-greedy", action="store_true", help="greedy evaluation (default: sampled, as the paper)")
    p.add_argument("--strategies", default=",".join(STRATEGIES), help="level strategies to compare")
    p.add_argument("--out-dir", default=None, help="run directories (default: a fresh benchmarks/out/plr_vs_uniform)")
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "out" / "plr_vs_uniform.json"))
    p.add_argument("train_args", nargs="*", help="extra `levelray train` flags, after --")
    args = p.parse_args(argv)

    total = args.total_steps or (4000 if args.quick else 20_000)
    episodes = args.eval_episodes or (8 if args.quick else 32)
    out = Path(args.out_dir) if args.out_dir else ROOT / "benchmarks" / "out" / "plr_vs_uniform"
    if out.exists() and not args.out_dir:
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    common = ["--backend", args.backend, "--env", args.env, "--distribution-mode", "easy",
              "--num-levels", str(args.num_levels), "--start-level", "0", "--total-steps", str(total),
              "--seed", str(args.seed), "--metrics-port", "0", "--report-interval", "5", "--quiet"]
    if args.quick:
        common += ["--num-actors", "2", "--envs-per-actor", "4"]  # 2 actors: batches of 2 distinct unrolls
    common += args.train_args

    rows, results = [], {}
    for strategy in strategies:
        run = out / strategy
        start = time.time()
        _run([*LEVELRAY, "train", *common, "--level-strategy", strategy, "--run-dir", str(run)],
             out / f"train-{strategy}.log")
        train_s = time.time() - start
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
        last = records[-1]
        eval_cmd = [*LEVELRAY, "evaluate", str(run), "--levels", "train,test", "--episodes", str(episodes),
                    "--seed", str(args.seed), "--json", "--backend", args.backend]
        if args.eval_greedy:
            eval_cmd.append("--greedy")
        ev = json.loads(_run(eval_cmd, out / f"evaluate-{strategy}.log").strip().splitlines()[-1])
        tr, te = ev["results"]["train"], ev["results"]["test"]
        paper = PAPER.get(args.env, {}).get(strategy)
        results[strategy] = {
            "run_dir": str(run),
            "env_steps": last["env_steps"],
            "train_wall_s": train_s,
            "env_steps_per_second": last["env_steps"] / train_s,
            "training_return_last100": last.get("episode_return_mean"),
            "train_return": tr["return_mean"],
            "train_return_median": tr["return_median"],
            "test_return": te["return_mean"],
            "test_return_median": te["return_median"],
            "train_success": tr["success_rate"],
            "test_success": te["success_rate"],
            "generalization_gap": ev["generalization_gap"],
            "eval_episodes": episodes,
            "paper_test_return": paper,
        }
        rows.append([strategy, f"{last['env_steps']:,}", round(train_s), tr["return_mean"], te["return_mean"],
                     ev["generalization_gap"], tr["success_rate"] or 0.0, te["success_rate"] or 0.0,
                     "n/a" if paper is None else f"{paper} @ {PAPER[args.env]['steps'] // 1_000_000}M"])
    _run([*LEVELRAY, "report", *(str(out / s) for s in strategies), "--out", str(out / "report")],
         out / "report.log")

    print(f"\n{args.env} (easy), {args.num_levels} training levels, {total:,} env steps per run, backend "
          f"{args.backend}, evaluation: {episodes} {'greedy' if args.eval_greedy else 'sampled'} episodes per set")
    print_table(rows, ["strategy", "env steps", "train s", "train return", "test return", "gap", "train success",
                       "test success", "paper test return"])
    if args.env in PAPER and total < PAPER[args.env]["steps"] // 10:
        print(f"note: {total:,} steps is {100 * total / PAPER[args.env]['steps']:.2f}% of the paper's budget; "
              "these returns show the pipeline works, not which strategy generalises better")
    print(f"figures: {out / 'report'}")
    data = {
        "env": args.env, "distribution_mode": "easy", "num_levels": args.num_levels, "total_steps": total,
        "backend": args.backend, "seed": args.seed, "eval_greedy": args.eval_greedy, "train_args": args.train_args,
        "paper": PAPER.get(args.env), "strategies": results,
    }
    write_json(args.json, {"results": data}, benchmark="plr_vs_uniform")
    return 0


if __name__ == "__main__":
    sys.exit(main())

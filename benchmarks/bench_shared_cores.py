"""Several `levelray train --backend inline` runs sharing the machine's cores: env steps/s together and alone.

    python -m benchmarks.bench_shared_cores [--arms today,today-1t,new] [--runs 2,3] [--rounds 3] [--seconds 20]
        [--base /work/wt/base/.venv/bin/levelray] [--out-dir /tmp/bench_shared_cores] [--json PATH] [--learning]

Researchers run several experiments on one workstation. Each run here is an inline job (`--num-actors 1
--envs-per-actor 16`, the env's preset otherwise) on MiniGrid `minigrid:SimpleCrossingS9N1` or `CartPole-v1`.
A round:
- `alone`: each env's run by itself (one after the other);
- `N at once` for each N of `--runs`: N runs started together, the envs taken in turn (2: MiniGrid + CartPole;
  3: MiniGrid + CartPole + MiniGrid, seeds differing);
each of these for every arm in turn (the arms' order rotates from round to round), so that the groups an arm is
compared with ran a minute or two before or after it: the machine's load drifts over minutes.

An arm is a `levelray` executable with environment variables and flags (`ARMS`): `today` is the code before
threads were sized by the run (`--base`, the executable of a checkout of it), `today-1t` the same with the
hand-set `OMP_NUM_THREADS=1 MKL_NUM_THREADS=1` (what the project's benchmarks set for their runs), `new` this
checkout with no flags; the others set the thread count or OpenMP's wait policy by hand, to measure each part of
the rule (`policy/threads.py`).

Env steps/s of a run: every run of a group has started training (its first `metrics.jsonl` record; records come
every second: `--report-interval 1`), then the group trains `--seconds` more and is stopped (SIGINT: the final
checkpoint); a run's env steps in that window are interpolated from its records at both ends. So start-up
(imports, env creation, the first update), which differs between runs started together, is not counted, and
every run of a group is measured over the same window. The group's aggregate is the sum of its runs' rates;
`vs one after the other` is sum(rate at once / the same env's rate alone, same arm and round): above 1, running
them together did the same work sooner than running them in turn. The 1-minute load average (`uptime`) at the
window's start and end is printed beside each group: the machine may be shared with other work.

The policy does not learn (`--learning-rate 0`, the same update work; `--learning` lets it): learning changes
episode lengths, and so env steps/s, differently in each run.

`--phases N` measures instead what torch's threads can change at all: one inline run of each env on one thread,
its main thread's CPU seconds (`time.thread_time`, whatever else the machine runs) split into the envs, the
policy's forward passes and the learner's updates over N updates (`phase_shares`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import LEVELRAY, ROOT, fmt_ci, print_table, write_json
from levelray.deploy.report.runs import read_records
from levelray.deploy.report.stats import ci_summary

MINIGRID, CARTPOLE = "minigrid:SimpleCrossingS9N1", "CartPole-v1"
ENVS = (MINIGRID, CARTPOLE)
DEFAULT_BASE = "/work/wt/base/.venv/bin/levelray"
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
# name -> (executable: "base" or "this", environment variables, extra `levelray train` flags)
ARMS: dict[str, tuple[str, dict[str, str], list[str]]] = {
    "today": ("base", {}, []),
    "today-1t": ("base", ONE_THREAD, []),
    "today-passive": ("base", {"OMP_WAIT_POLICY": "PASSIVE"}, []),
    "new": ("this", {}, []),
    "new-1t": ("this", {}, ["--num-threads", "1"]),
    "new-2t": ("this", {}, ["--num-threads", "2"]),
    # libgomp's own wait where OMP_WAIT_POLICY is unset: spin ~300k rounds (about 3 ms) before sleeping
    "new-2t-spin": ("this", {"GOMP_SPINCOUNT": "300000"}, ["--num-threads", "2"]),
    "new-hand-1t": ("this", ONE_THREAD, []),
}
START_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 120.0


def executable(arm: str, base: str) -> list[str]:
    where = ARMS[arm][0]
    return [base] if where == "base" else LEVELRAY


def train_command(exe: list[str], env_id: str, seed: int, run_dir: Path, extra: list[str]) -> list[str]:
    """An inline run of `env_id` on its preset with 1 actor x 16 envs, stopped by a signal (no step budget)."""
    return [*exe, "train", "--backend", "inline", "--env", env_id, "--num-actors", "1", "--envs-per-actor", "16",
            "--total-steps", "1000000000", "--seed", str(seed), "--metrics-port", "0", "--report-interval", "1",
            "--checkpoint-interval", "1000000", "--tensorboard", "false", "--quiet", "--overwrite",
            "--run-dir", str(run_dir), *extra]


def steps_at(records: list[dict], t: float) -> float:
    """Env steps at time `t`, linear between the records on either side (clamped at the ends)."""
    if t <= records[0]["time"]:
        return float(records[0]["env_steps"])
    for a, b in zip(records, records[1:], strict=False):
        if a["time"] <= t <= b["time"]:
            if b["time"] == a["time"]:
                return float(b["env_steps"])
            return a["env_steps"] + (b["env_steps"] - a["env_steps"]) * (t - a["time"]) / (b["time"] - a["time"])
    return float(records[-1]["env_steps"])


def run_group(arm: str, envs: list[str], seeds: list[int], seconds: float, out: Path, tag: str,
              args: argparse.Namespace) -> dict:
    """Start one run per env at once, wait until all train, measure `seconds`, stop them: the group's rates."""
    _where, env_vars, flags = ARMS[arm]
    exe = executable(arm, args.base)
    procs, dirs = [], []
    for i, (env_id, seed) in enumerate(zip(envs, seeds, strict=True)):
        run_dir = out / f"{tag}-{i}"
        log = (out / f"{tag}-{i}.log").open("w")
        cmd = train_command(exe, env_id, seed, run_dir, [*flags, *args.train_args])
        procs.append(subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                      env={**os.environ, **env_vars}))
        dirs.append(run_dir)
    try:
        deadline = time.time() + START_TIMEOUT_S
        while not all(read_records(d, missing_ok=True) for d in dirs):
            failed = [p.args for p in procs if p.poll() is not None]
            if failed or time.time() > deadline:
                raise SystemExit(f"{tag}: a run ended or did not start in time (logs in {out})")
            time.sleep(0.2)
        t0, load0 = time.time(), os.getloadavg()[0]
        time.sleep(seconds)
        t1, load1 = time.time(), os.getloadavg()[0]
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p in procs:
            try:
                p.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    runs = []
    for env_id, run_dir in zip(envs, dirs, strict=True):
        records = [r for r in read_records(run_dir) if "time" in r and "env_steps" in r]
        steps = steps_at(records, t1) - steps_at(records, t0)
        threads = next((r.get("torch_threads") for r in reversed(records) if r.get("torch_threads")), None)
        runs.append({"env": env_id, "env_steps": steps, "rate": steps / (t1 - t0), "torch_threads": threads,
                     "run_dir": str(run_dir)})
    return {"arm": arm, "envs": envs, "window_s": t1 - t0, "load_start": load0, "load_end": load1, "runs": runs,
            "aggregate": sum(r["rate"] for r in runs)}


def one_round(k: int, arms: list[str], runs_at_once: list[int], args: argparse.Namespace, out: Path) -> list[dict]:
    """Each env alone, then each group size at once; each of them for every arm in turn (order rotated by round
    `k`), so that the arms of one comparison run minutes apart at most."""
    groups = []
    order = arms[k % len(arms):] + arms[:k % len(arms)]
    alone = {}
    for env_id in ENVS:
        for arm in order:
            g = run_group(arm, [env_id], [k], args.seconds, out, f"r{k}-{arm}-alone-{env_id.split(':')[-1]}", args)
            alone[(arm, env_id)] = g["runs"][0]["rate"]
            groups.append({**g, "round": k, "kind": "alone"})
            report(groups[-1])
    for n in runs_at_once:
        envs = [ENVS[i % len(ENVS)] for i in range(n)]
        for arm in order:
            g = run_group(arm, envs, [k * 10 + i for i in range(n)], args.seconds, out, f"r{k}-{arm}-x{n}", args)
            g["vs_one_after_the_other"] = sum(r["rate"] / alone[(arm, r["env"])] for r in g["runs"])
            groups.append({**g, "round": k, "kind": f"{n} at once"})
            report(groups[-1])
    return groups


def report(g: dict) -> None:
    rates = ", ".join(f"{r['env'].split(':')[-1]} {r['rate']:,.0f}" for r in g["runs"])
    vs = f"  x{g['vs_one_after_the_other']:.2f} vs in turn" if "vs_one_after_the_other" in g else ""
    print(f"round {g['round']} {g['arm']:>13} {g['kind']:>9}: {g['aggregate']:>9,.0f} env steps/s ({rates}; "
          f"threads {[r['torch_threads'] for r in g['runs']]}){vs}  load {g['load_start']:.1f}->{g['load_end']:.1f}",
          file=sys.stderr, flush=True)


def summarise(groups: list[dict], arms: list[str]) -> list[dict]:
    """Per arm and kind: the aggregate's median and mean ± CI over rounds, and the same for `vs in turn`."""
    rows = []
    for kind in dict.fromkeys(g["kind"] for g in groups):
        for arm in arms:
            gs = [g for g in groups if g["arm"] == arm and g["kind"] == kind]
            if kind == "alone":
                for env_id in ENVS:
                    rates = [r["rate"] for g in gs for r in g["runs"] if r["env"] == env_id]
                    rows.append({"kind": f"alone {env_id.split(':')[-1]}", "arm": arm,
                                 "median": statistics.median(rates), "stat": ci_summary(rates), "vs": None,
                                 "load": [g["load_start"] for g in gs]})
                continue
            agg = [g["aggregate"] for g in gs]
            vs = [g["vs_one_after_the_other"] for g in gs]
            rows.append({"kind": kind, "arm": arm, "median": statistics.median(agg), "stat": ci_summary(agg),
                         "vs": statistics.median(vs), "load": [g["load_start"] for g in gs]})
    return rows


def paired_ratios(groups: list[dict], kind: str, a: str, b: str, env_id: str | None = None) -> list[float]:
    """Per round: arm `b`'s aggregate (or `env_id`'s rate alone) / arm `a`'s, for the rounds both ran."""
    def value(g: dict) -> float:
        if env_id is None:
            return g["aggregate"]
        return next(r["rate"] for r in g["runs"] if r["env"] == env_id)

    by = {}
    for g in groups:
        if g["kind"] == kind and (env_id is None or g["envs"] == [env_id]):
            by[(g["round"], g["arm"])] = value(g)
    rounds = sorted({k for k, _ in by})
    return [by[(k, b)] / by[(k, a)] for k in rounds if (k, a) in by and (k, b) in by]


def phase_shares(env_id: str, updates: int) -> dict:
    """CPU seconds of one inline run's phases on one torch thread (`time.thread_time`: what the main thread
    computed, whatever else the machine runs): the envs (and the rollout's bookkeeping), the policy's forward
    passes, the learner's updates. What a second torch thread could shorten is the last two."""
    import torch

    from levelray.contracts.config import RunConfig, replace_paths
    from levelray.contracts.presets import apply_preset
    from levelray.deploy.training.inline import InlineBackend

    torch.set_num_threads(1)
    flags = {"env.id": env_id, "actors.num_actors": 1, "actors.envs_per_actor": 16, "backend": "inline",
             "learner.learning_rate": 0.0}
    backend = InlineBackend(apply_preset(replace_paths(RunConfig(), flags), set(flags)))
    worker, act, spent = backend.workers[0], backend.workers[0].act, {"act": 0.0, "collect": 0.0, "train": 0.0}

    def timed_act(*a, **k):
        start = time.thread_time()
        out = act(*a, **k)
        spent["act"] += time.thread_time() - start
        return out

    worker.act = timed_act
    for i in range(5 + updates):
        if i == 5:  # after the warm-up
            spent = dict.fromkeys(spent, 0.0)
        t0 = time.thread_time()
        fresh = [u for u in (worker.unroll() for _ in range(backend.core.num_fresh)) if backend.core.accept(u)]
        t1 = time.thread_time()
        backend.core.train(fresh)
        backend._broadcast()
        spent["collect"] += t1 - t0
        spent["train"] += time.thread_time() - t1
    backend.close()
    total = spent["collect"] + spent["train"]
    return {"env": env_id, "updates": updates, "env_s": spent["collect"] - spent["act"], "policy_s": spent["act"],
            "learner_s": spent["train"], "env_share": (spent["collect"] - spent["act"]) / total,
            "policy_share": spent["act"] / total, "learner_share": spent["train"] / total,
            "numpy_policy": worker.policy.numpy_policy is not None}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arms", default="today,today-1t,new", help=f"comma-separated, of: {', '.join(ARMS)}")
    p.add_argument("--runs", default="2,3", help="group sizes run at once (each also against its runs alone)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=20.0, help="measured seconds per group, after start-up")
    p.add_argument("--base", default=DEFAULT_BASE, help="the `levelray` executable of the code before (arms today*)")
    p.add_argument("--out-dir", default="/tmp/bench_shared_cores", help="run directories and logs (emptied first)")
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "out" / "bench_shared_cores.json"))
    p.add_argument("--learning", action="store_true", help="let the policy learn (default: learning rate 0)")
    p.add_argument("--phases", type=int, default=0, metavar="UPDATES",
                   help="instead: each env's CPU time by phase over UPDATES updates on one thread (phase_shares)")
    p.add_argument("train_args", nargs="*", help="extra `levelray train` flags for every run, after --")
    args = p.parse_args(argv)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        p.error(f"--arms: unknown {unknown}; known: {', '.join(ARMS)}")
    if any(ARMS[a][0] == "base" for a in arms) and not Path(args.base).exists():
        p.error(f"--base: {args.base} does not exist (arms {[a for a in arms if ARMS[a][0] == 'base']} need it)")
    if args.phases:
        rows = [phase_shares(env_id, args.phases) for env_id in ENVS]
        print_table(rows, ["env", "updates", ("env_share", "envs"), ("policy_share", "policy forward"),
                           ("learner_share", "learner"), "numpy_policy"], title="share of the CPU time, one thread")
        write_json(args.json, {"phases": rows}, benchmark="bench_shared_cores --phases")
        return 0
    runs_at_once = [int(n) for n in args.runs.split(",") if n.strip()]
    if not args.learning:
        args.train_args = ["--learning-rate", "0", *args.train_args]
    out = Path(args.out_dir)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)

    started = time.time()
    groups = [g for k in range(args.rounds) for g in one_round(k, arms, runs_at_once, args, out)]
    rows = summarise(groups, arms)
    print(f"\n{args.rounds} rounds, {args.seconds:.0f} s measured per group, cpus {os.cpu_count()}, "
          f"{(time.time() - started) / 60:.1f} min in all")
    print_table([[r["kind"], r["arm"], f"{r['median']:,.0f}", fmt_ci(r["stat"], ",.0f"),
                  "-" if r["vs"] is None else f"{r['vs']:.2f}", " ".join(f"{x:.1f}" for x in r["load"])]
                 for r in rows],
                ["group", "arm", "env steps/s (median)", "mean ± 95% CI", "vs in turn", "load per round"])
    comparisons = {}
    for a, b in [(ref, b) for ref in ("today", "today-1t") if ref in arms for b in arms if b != ref]:
        for kind in dict.fromkeys(g["kind"] for g in groups):
            for env_id in ENVS if kind == "alone" else (None,):
                ratios = paired_ratios(groups, kind, a, b, env_id)
                if ratios:
                    label = f"{b} / {a}, {kind}" + (f" {env_id.split(':')[-1]}" if env_id else "")
                    comparisons[label] = {"median": statistics.median(ratios), **ci_summary(ratios),
                                          "per_round": ratios}
    print_table([[k, f"{v['median']:.3f}", fmt_ci(v, ".3f"), " ".join(f"{x:.2f}" for x in v["per_round"])]
                 for k, v in comparisons.items()], ["paired ratio", "median", "mean ± 95% CI", "per round"])
    config = {"arms": {a: ARMS[a] for a in arms}, "runs_at_once": runs_at_once, "rounds": args.rounds,
              "seconds": args.seconds, "envs": ENVS, "base": args.base, "train_args": args.train_args,
              "command": train_command(["levelray"], "ENV", 0, Path("RUN"), args.train_args)}
    write_json(args.json, {"config": config, "groups": groups, "summary": rows, "comparisons": comparisons},
               benchmark="bench_shared_cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())

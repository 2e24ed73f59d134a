"""The level service's CPU per env step: `levelray train` on Ray, two codes interleaved.

    python -m benchmarks.level_service_cpu [--base /work/wt/base/.venv/bin/levelray] [--rounds 3]
        [--cases cartpole-buffer,doorkey-fixed] [--out-dir DIR] [--json PATH]

Where PLR's work is done decides what the level service costs: scored by the learner, the service receives every
unroll's steps (values, rewards, dones per step) and cuts them into episodes; scored by the actors, it receives one
record per finished episode. Both arms run the same `levelray train` command on the Ray backend, one run at a time:
`base` is a checkout of the code before (`--base`, its `levelray` executable), `this` this checkout; rounds
alternate the order (ABBA). The policy does not learn (`--learning-rate 0`): both arms play the same kind of
episodes, the shortest, where the level traffic per step is largest.

The service's CPU: utime + stime of the process titled `ray::LevelService` (`/proc/PID/stat`, read once a second
while the run lives; the last reading before it ends), over the run's env steps (its final `metrics.jsonl` record):
microseconds of CPU per env step. CPU time, not wall time: it does not grow when the machine is shared, so the
numbers hold under load (the load is printed beside them).

Cases (`CASES`): `cartpole-buffer` (CartPole-v1, `--num-levels 0`, a 4,000-level buffer, `value_l1`: the most
episodes per step) and `doorkey-fixed` (MiniGrid DoorKey-8x8, 200 training levels, `value_l1`: PLR's own setting).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import LEVELRAY, ROOT, fmt_ci, print_table, write_json
from levelray.deploy.report.runs import read_records
from levelray.deploy.report.stats import ci_summary

DEFAULT_BASE = "/work/wt/base/.venv/bin/levelray"
CASES: dict[str, list[str]] = {
    "cartpole-buffer": ["--env", "CartPole-v1", "--num-levels", "0", "--total-steps", "1000000"],
    "doorkey-fixed": ["--env", "minigrid:DoorKey-8x8", "--num-levels", "200", "--total-steps", "300000"],
}
COMMON = ["--backend", "ray", "--level-strategy", "value_l1", "--learning-rate", "0", "--report-interval", "1",
          "--tensorboard", "false"]
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def service_pids() -> list[int]:
    """The pids of processes titled `ray::LevelService...` (Ray sets an actor process's title to its class)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if cmdline.startswith(b"ray::LevelService"):
                pids.append(int(entry.name))
    return pids


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of `pid` in seconds; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # fields 14 and 15 of stat(5), counted from state


def run_once(exe: list[str], case: str, seed: int, run_dir: Path) -> dict:
    """One run; returns its env steps, the service's CPU seconds and the load at both ends."""
    cmd = [*exe, "train", *CASES[case], *COMMON, "--seed", str(seed), "--run-dir", str(run_dir)]
    load0 = os.getloadavg()[0]
    cpu: dict[int, float] = {}  # pid -> its last reading (a restarted service is a second process)
    with open(run_dir.parent / f"{run_dir.name}.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        while proc.poll() is None:
            for pid in service_pids():
                seconds = cpu_seconds(pid)
                if seconds is not None:
                    cpu[pid] = seconds
            time.sleep(1.0)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed (exit {proc.returncode}); see {log.name}")
    env_steps = read_records(run_dir)[-1]["env_steps"]
    return {"env_steps": env_steps, "service_cpu_s": sum(cpu.values()), "service_processes": len(cpu),
            "load": [round(load0, 2), round(os.getloadavg()[0], 2)]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", default=DEFAULT_BASE, help="the `levelray` executable of the code before")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "out" / "level_service_cpu"))
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "out" / "level_service_cpu.json"))
    args = p.parse_args()
    out = Path(args.out_dir)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    arms = {"base": [args.base], "this": LEVELRAY}
    results = []
    for case in args.cases.split(","):
        for r in range(args.rounds):
            for arm in (("base", "this") if r % 2 == 0 else ("this", "base")):
                res = run_once(arms[arm], case, r, out / f"{case}-{arm}-r{r}")
                res.update(case=case, arm=arm, round=r,
                           us_per_step=1e6 * res["service_cpu_s"] / max(res["env_steps"], 1))
                print(f"{case:16s} {arm:5s} round {r}: {res['us_per_step']:.2f} us/env step "
                      f"({res['service_cpu_s']:.1f} s over {res['env_steps']:,} steps; load {res['load']})",
                      file=sys.stderr, flush=True)
                results.append(res)
    rows = []
    for case in args.cases.split(","):
        per = {a: [x["us_per_step"] for x in results if x["case"] == case and x["arm"] == a] for a in arms}
        ratios = [t / b for b, t in zip(per["base"], per["this"], strict=True)]
        rows.append({"case": case, "base": statistics.median(per["base"]), "this": statistics.median(per["this"]),
                     "ratio": fmt_ci(ci_summary(ratios))})
    print_table(rows, [("case", "case"), ("base", "base (median)", lambda v: f"{v:.2f} us"),
                       ("this", "this (median)", lambda v: f"{v:.2f} us"), ("ratio", "this / base, paired")])
    write_json(args.json, {"results": results, "rows": rows}, benchmark="level_service_cpu")


if __name__ == "__main__":
    main()

"""levelray vs RLlib IMPALA on CartPole-v1 (or a MiniGrid env), side by side on this machine, in one run.

    python -m benchmarks.bench_vs_rllib [--budget-s 150] [--quick] [--skip-rllib] [--skip-levelray]
                                        [--procgen | --no-procgen] [--levelray-args "..."] [--json PATH]
    python -m benchmarks.bench_vs_rllib --env minigrid:DoorKey-6x6 [--steps 1000000] [--budget-s 1000]
                                        [--level-strategies random[,value_l1]] [--num-levels 200] [--quick] ...

Both systems get the same env copies (2 actors/runners x 8 envs) and run one after the other, each in its own
subprocess (so each starts and stops its own local Ray), until the mean episode return reaches 475 or the
training time budget ends:

- levelray: `.venv/bin/levelray train --env CartPole-v1 ... --stop-at-return 475 --report-interval 1` with
  no tuning flag: the classic-control preset (`contracts/presets.py`) gives one actor per core (2 here) x 8
  envs, 4 unrolls per Ray call (Ray's per-call cost is paid once per 640 steps), 8 unrolls (1,280 steps) per
  update, which keeps the learner ahead of the actors on 2 cores (policy lag ~2.5 versions), lr 1e-3, no level
  service. Read back from the run directory's `metrics.jsonl`; stopped with SIGINT when the budget ends (it
  writes a final checkpoint). `--levelray-args "..."` appends flags that override the preset.
- RLlib 2.60 IMPALA, new API stack, in its own venv (`benchmarks/.venv-rllib`, created on first use: torch
  2.13.0 CPU first, then `ray[rllib]==2.60.0 gymnasium==1.2.2 "numpy<2" pyarrow==21.0.0`: RLlib 2.60 pins
  gymnasium 1.2.2, whose CartPole-v1 is the same task as 1.4.0's, and newer pyarrow needs numpy 2).
  Config: `IMPALAConfig().environment("CartPole-v1").env_runners(num_env_runners=2, num_envs_per_env_runner=8)
  .training(lr=5e-4, entropy_coeff=0.01, train_batch_size_per_learner=500)`, all else default, Ray
  started with `num_cpus = runners + 2` (one learner actor and the driver; with fewer it waits forever).
  One JSON line per `algo.train()` (RLlib IMPALA iterations last at least 10 s).

Clocks (Ray startup, actor/runner creation and model building are excluded for both):
- levelray: t=0 is the last `metrics.jsonl` record that still shows 0 env steps (reports are 1 s apart and the
  first one is taken right after the job's actors are created), i.e. just before the first unroll reached the
  learner. If the very first record already shows steps, t=0 is that record and its steps are not counted.
- RLlib: t=0 is the start of the first `algo.train()` call (after `ray.init` and `config.build_algo()`).
- "startup s" = process launch to t=0 (imports, Ray start, actors/env runners, model); "shutdown_s" in the JSON =
  end of training to process exit (levelray writes a final checkpoint).
- Env steps: levelray counts steps received by its learner, RLlib `num_env_steps_sampled_lifetime` (sampled by
  its env runners, which is never less).
- Env steps/s overall = env steps / training wall time; steady = over the last half of the training time
  (from the first report at or after half time to the last one). Time to 475 is the first report at or above
  it (1 s resolution for levelray, one iteration, about 10 s, for RLlib).

MiniGrid (`--env minigrid:<name>`, instead of the CartPole and procgen sections; JSON to
`benchmarks/out/bench_vs_rllib_minigrid.json`): both systems train on the same 200 training levels (reset seeds
0-199, `--num-levels`), each episode on a level drawn uniformly, to the same env-step budget (`--steps`,
1,000,000; 60,000 with --quick) or `--budget-s` of training (1000 s; 120 quick), whichever comes first, and run
to the end (`--target`, mean return 0.8, is only reported as the env steps where it was first reached):

- levelray: `levelray train --env minigrid:<name> --level-strategy random --num-levels 200 --start-level 0
  --total-steps N`, no tuning flag: the minigrid preset (`contracts/presets.py`: one actor per core x 16 envs,
  unroll 20, batch 2, minigrid_cnn, lr 5e-4, entropy 0.01). `--level-strategies random,value_l1` adds a PLR run
  (RLlib has no PLR, so `random` is the like-for-like one).
- RLlib: the CartPole config above with as many env runners x envs as the preset gives levelray (2 x 16 here,
  `num_cpus = runners + 2`), on an env registered with `tune.register_env` that is levelray's own wrapper,
  `actors/minigrid_obs.py` loaded by path (it imports only gymnasium, minigrid and numpy; minigrid 3.0.0 and
  pygame are added to the RLlib venv on first use, gymnasium stays at RLlib's 1.2.2): the same uint8
  [7, 7, 4] view (MiniGrid's symbolic 7x7x3 plus the direction), flattened to 196 float32 so that RLlib's
  default encoder (an MLP, [256, 256] tanh) reads it: RLlib's default CNN filters fit no 7x7 image, and
  levelray's MiniGridNet (embeddings + 2x2 convs) has no RLlib default counterpart. Its reset seed is drawn
  uniformly from the training levels on every reset (the seed RLlib passes only seeds that draw). The return
  is RLlib's `env_runners/episode_return_mean` as it reports it (each runner keeps a window of 100 / runners
  episodes, merged by the algorithm every iteration); levelray's is the mean of the learner's last 100
  episodes. Early on RLlib's rests on few episodes (`episodes_lifetime` in the JSON), and short (successful)
  episodes end first.
- Both report: env steps/s overall and steady (as above), the mean return at the end and at the first report
  at or after 1/4, 1/2, 3/4 and all of the budget and at the most env steps both reached, and the 1-minute
  load average before and after each system's run (`load_start`, `load_end`: the machine is shared).

The procgen section (default on, off with --quick) runs levelray alone on procgen:bigfish (IMPALA CNN, 2 actors
x 16 envs, PLR defaults) for --procgen-budget-s, stops it with SIGINT, and puts its steady env steps/s next to
the learner-bound ceiling measured by bench_learner.py (`benchmarks/out/bench_learner.json`, impala_cnn
samples/s, a batch of 32 unrolls x 20 steps: the same 640 samples as 2 unrolls of 16 envs x 20 steps).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.common import print_table, write_json
from levelray.deploy.report.runs import read_records

ROOT = Path(__file__).resolve().parents[1]
LEVELRAY = ROOT / ".venv" / "bin" / "levelray"
RLLIB_VENV = ROOT / "benchmarks" / ".venv-rllib"
TARGET_RETURN = 475.0
TARGET_SPEEDUP = 10.0
TARGET_TIME_S = 60.0
NUM_ACTORS, ENVS_PER_ACTOR = 2, 8
STARTUP_TIMEOUT_S = 240.0  # from launch to the first training report, before we give up on a system
STOP_TIMEOUT_S = 120.0  # from SIGINT to exit (levelray writes a final checkpoint)

RLLIB_CONFIG = {"env": "CartPole-v1", "num_env_runners": NUM_ACTORS, "num_envs_per_env_runner": ENVS_PER_ACTOR,
                "lr": 5e-4, "entropy_coeff": 0.01, "train_batch_size_per_learner": 500,
                "ray_init_num_cpus": NUM_ACTORS + 2}
# torch first (a CPU wheel pinned by version: pip never pulls a CUDA build). ray[rllib] 2.60 pins gymnasium 1.2.2
# and takes any pyarrow>=17; pyarrow 26 needs numpy 2, and 21.0.0 is the pin that imports with numpy 1.26.
RLLIB_PIP = [["torch==2.13.0"], ["ray[rllib]==2.60.0", "gymnasium==1.2.2", "numpy<2", "pyarrow==21.0.0"]]
# For the MiniGrid section only, into the same venv: the main venv's pins (minigrid 3.0.0 takes gymnasium>=0.28.1,
# so RLlib's 1.2.2 stays; it imports pygame at module level).
RLLIB_MINIGRID_PIP = ["minigrid==3.0.0", "pygame==2.6.1"]
MINIGRID_WRAPPER = ROOT / "actors" / "minigrid_obs.py"  # levelray's observation encoding, loaded by path

# Run with the RLlib venv's python: argv[1] is a JSON object (RLLIB_CONFIG plus budget_s and target).
RLLIB_SCRIPT = r'''
import json, math, os, sys, time

import ray
from ray.rllib.algorithms.impala import IMPALAConfig

a = json.loads(sys.argv[1])
launched = time.perf_counter()
ray.init(address="local", num_cpus=a["ray_init_num_cpus"], include_dashboard=False, log_to_driver=False)
env = a["env"]
if a.get("minigrid"):
    from ray.tune.registry import register_env

    mg = a["minigrid"]

    def make_minigrid(env_config):
        # levelray's own wrapper (actors/minigrid_obs.py imports only gymnasium, minigrid and numpy), loaded by
        # path: the same uint8 [7, 7, 4] view levelray's actors see, flattened to 196 floats for RLlib's MLP.
        import importlib.util

        import gymnasium as gym
        import numpy as np

        spec = importlib.util.spec_from_file_location("levelray_minigrid_env", mg["wrapper"])
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)

        class TrainLevels(gym.Wrapper):
            """Every episode on a training level (reset seed) drawn uniformly from num_levels, as levelray's
            --level-strategy random does; the seed RLlib passes only seeds that draw."""

            def __init__(self, env):
                super().__init__(env)
                self.observation_space = gym.spaces.Box(0.0, 255.0, (int(np.prod(env.observation_space.shape)),),
                                                        np.float32)
                self.rng = np.random.default_rng()

            def reset(self, *, seed=None, options=None):
                if seed is not None:
                    self.rng = np.random.default_rng(seed)
                level = mg["start_level"] + int(self.rng.integers(mg["num_levels"]))
                obs, info = self.env.reset(seed=level, options=options)
                return obs.reshape(-1).astype(np.float32), info

            def step(self, action):
                obs, reward, terminated, truncated, info = self.env.step(action)
                return obs.reshape(-1).astype(np.float32), reward, terminated, truncated, info

        return TrainLevels(mod.make(mg["gym_id"]))

    register_env("levelray-minigrid", make_minigrid)
    env = "levelray-minigrid"
config = (
    IMPALAConfig()
    .environment(env)
    .env_runners(num_env_runners=a["num_env_runners"], num_envs_per_env_runner=a["num_envs_per_env_runner"])
    .training(lr=a["lr"], entropy_coeff=a["entropy_coeff"],
              train_batch_size_per_learner=a["train_batch_size_per_learner"])
)
algo = config.build_algo()
print("RLLIB_JSON " + json.dumps({"init_and_build_s": time.perf_counter() - launched}), flush=True)


def pick(result, key):
    for d in (result, result.get("env_runners", {})):
        if isinstance(d, dict) and key in d:
            return d[key]
    return None


print("RLLIB_JSON " + json.dumps({"t0_wall": time.time()}), flush=True)
t0 = time.perf_counter()
while True:
    result = algo.train()
    t = time.perf_counter() - t0
    ret = pick(result.get("env_runners", {}), "episode_return_mean")
    ret = None if ret is None or (isinstance(ret, float) and math.isnan(ret)) else float(ret)
    steps = pick(result, "num_env_steps_sampled_lifetime")
    print("RLLIB_JSON " + json.dumps({"t": t, "env_steps": steps, "episode_return_mean": ret,
                                      "episodes": pick(result, "num_episodes_lifetime"),
                                      "iteration": result.get("training_iteration")}), flush=True)
    if ((a["target"] is not None and ret is not None and ret >= a["target"]) or t >= a["budget_s"]
            or (a.get("budget_steps") and (steps or 0) >= a["budget_steps"])):
        break
algo.stop()
ray.shutdown()
'''


# ----------------------------------------------------------------------------------------------- helpers


def child_env() -> dict:
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)  # each system starts its own local Ray, never joins another one
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def stop_process(proc: subprocess.Popen, timeout: float = STOP_TIMEOUT_S) -> None:
    """SIGINT, wait; then SIGTERM, SIGKILL. Only this process (its own session) is signalled."""
    for sig, wait in ((signal.SIGINT, timeout), (signal.SIGTERM, 30.0), (signal.SIGKILL, 30.0)):
        if proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            print(f"  (pid {proc.pid} still running {wait:.0f} s after {sig.name})", flush=True)


def tail(path: Path, n: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def summarize(points: list[tuple[float, float, float | None]], budget_s: float,
              target: float = TARGET_RETURN) -> dict:
    """points: (seconds since t=0, env steps since t=0, mean return or None), in time order."""
    points = [p for p in points if p[0] > 0]
    if not points:
        return {"ok": False, "error": "no training reports"}
    t_end, steps_end, _ = points[-1]
    mid = next(p for p in points if p[0] >= t_end / 2)
    steady = (steps_end - mid[1]) / (t_end - mid[0]) if t_end > mid[0] else None
    if steady is None and len(points) >= 2:  # too few reports: use the last interval
        (ta, sa, _), (tb, sb, _) = points[-2], points[-1]
        steady = (sb - sa) / (tb - ta)
    returns = [p[2] for p in points if p[2] is not None]
    hit = next((p for p in points if p[2] is not None and p[2] >= target), None)
    return {
        "ok": True,
        "train_wall_s": t_end,
        "env_steps": int(steps_end),
        "steps_per_s_overall": steps_end / t_end,
        "steps_per_s_steady": steady,
        "time_to_target_s": hit[0] if hit else None,
        "env_steps_to_target": int(hit[1]) if hit else None,
        "best_return": max(returns) if returns else None,
        "final_return": points[-1][2],
        "budget_s": budget_s,
        "series": [{"t": round(t, 3), "env_steps": int(s), "episode_return_mean": r} for t, s, r in points],
    }


# ----------------------------------------------------------------------------------------------- levelray


def levelray_clock(records: list[dict]) -> tuple[float, float, bool] | None:
    """(t0 wall time, env-step baseline, whether the first record already had steps), or None before training."""
    k = next((i for i, r in enumerate(records) if (r.get("env_steps") or 0) > 0), None)
    if k is None:
        return None
    if k > 0:
        return records[k - 1]["time"], 0.0, False
    return records[0]["time"], float(records[0]["env_steps"]), True


def run_levelray(name: str, flags: list[str], budget_s: float, *, stop_at_target: bool,
                 target: float = TARGET_RETURN) -> dict:
    run_dir = Path(tempfile.mkdtemp(prefix=f"bench_vs_rllib_{name}_"))
    log_path = run_dir.parent / f"{run_dir.name}.log"
    cmd = [str(LEVELRAY), "train", *flags, "--metrics-port", "0", "--run-dir", str(run_dir),
           "--report-interval", "1", "--quiet"]
    if stop_at_target:
        cmd += ["--stop-at-return", str(int(target))]
    print(f"[{name}] {' '.join(cmd[1:])}", flush=True)
    launched = time.time()
    sigint_at = None
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=child_env(),
                                start_new_session=True)
    try:
        last_print = 0.0
        while proc.poll() is None:
            time.sleep(0.5)
            records = read_records(run_dir, missing_ok=True)
            clock = levelray_clock(records)
            now = time.time()
            if clock is None:
                if now - launched > STARTUP_TIMEOUT_S:
                    print(f"[{name}] no env steps {STARTUP_TIMEOUT_S:.0f} s after launch: stopping", flush=True)
                    sigint_at = now
                    stop_process(proc)
                continue
            if now - last_print >= 10:
                r = records[-1]
                print(f"[{name}] t={r['time'] - clock[0]:6.1f}s steps={r['env_steps']:>9,} "
                      f"steps/s={r.get('env_steps_per_second') or 0:8,.0f} return={r.get('episode_return_mean')}",
                      flush=True)
                last_print = now
            if now - clock[0] >= budget_s:
                sigint_at = now
                stop_process(proc)
    finally:
        if proc.poll() is None:  # interrupted (Ctrl-C here): stop the child cleanly too
            sigint_at = sigint_at or time.time()
            stop_process(proc)
    stopped = time.time()
    records = read_records(run_dir, missing_ok=True)
    if sigint_at is not None:  # what was reported after SIGINT is shutdown, not training
        records = [r for r in records if r["time"] <= sigint_at]
    elif len(records) > 2:  # stopped by itself: drop the record the CLI appends after stopping the actors
        records = records[:-1]
    clock = levelray_clock(records)
    result = {"system": "levelray", "command": " ".join(cmd[1:]), "exit_code": proc.returncode,
              "startup_s": (clock[0] - launched) if clock else None, "log": str(log_path)}
    if clock is None:
        result.update(ok=False, error=f"no training reports; log tail:\n{tail(log_path)}")
        return result
    t0, base, late = clock
    # The run ends at the report that reached the target, at SIGINT, or at the last report before the CLI stopped.
    hit = next((i for i, r in enumerate(records) if (r.get("episode_return_mean") or -math.inf) >= target), None)
    if hit is not None and stop_at_target:
        records = records[: hit + 1]
    points = [(r["time"] - t0, r["env_steps"] - base, r.get("episode_return_mean")) for r in records]
    result["shutdown_s"] = stopped - (sigint_at or records[-1]["time"])  # end of training to process exit
    result.update(summarize(points, budget_s, target))
    result["clock_started_at_first_record"] = late
    result["learner_version"] = records[-1].get("learner_version")
    result["policy_lag_mean"] = records[-1].get("policy_lag_mean")
    if proc.returncode not in (0, None) and sigint_at is None:
        result["warning"] = f"exit code {proc.returncode}; log tail:\n{tail(log_path)}"
    shutil.rmtree(run_dir, ignore_errors=True)  # checkpoints are not needed; the log is kept
    return result


# ----------------------------------------------------------------------------------------------- RLlib


def ensure_rllib_venv(venv: Path, minigrid: bool = False) -> dict:
    """Create the RLlib venv if missing (and add minigrid to it if asked); returns how long it took and how big
    it is."""
    python = venv / "bin" / "python"
    if python.exists():
        probe = "import ray.rllib, torch; print(ray.__version__, torch.__version__)"
        check = subprocess.run([str(python), "-c", probe], capture_output=True, text=True)
        if check.returncode == 0:
            info = {"venv": str(venv), "created": False, "versions": check.stdout.strip()}
            if minigrid:
                info["minigrid"] = ensure_minigrid(python)
            return info
        print(f"[rllib] {venv} exists but does not import ray.rllib: reinstalling into it", flush=True)
    start = time.time()
    if not python.exists():
        print(f"[rllib] creating {venv}", flush=True)
        subprocess.run(["python3", "-m", "venv", str(venv)], check=True)
    for pkgs in RLLIB_PIP:
        print(f"[rllib] pip install {' '.join(pkgs)}", flush=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *pkgs], check=True)
    size = sum(f.stat().st_size for f in venv.rglob("*") if f.is_file() and not f.is_symlink())
    info = {"venv": str(venv), "created": True, "install_s": time.time() - start, "size_mb": size / 2**20}
    print(f"[rllib] venv ready in {info['install_s']:.0f} s, {info['size_mb']:,.0f} MB", flush=True)
    if minigrid:
        info["minigrid"] = ensure_minigrid(python)
    return info


def ensure_minigrid(python: Path) -> str:
    """minigrid in the RLlib venv (RLLIB_MINIGRID_PIP, a few seconds); returns the versions that import."""
    probe = "import minigrid, gymnasium; print(minigrid.__version__, gymnasium.__version__)"
    check = subprocess.run([str(python), "-c", probe], capture_output=True, text=True)
    if check.returncode != 0:
        print(f"[rllib] pip install {' '.join(RLLIB_MINIGRID_PIP)}", flush=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *RLLIB_MINIGRID_PIP], check=True)
        check = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=True)
    return "minigrid {} gymnasium {}".format(*check.stdout.split())


def run_rllib(budget_s: float, venv: Path, config: dict | None = None, *, target: float = TARGET_RETURN,
              stop_at_target: bool = True, budget_steps: int | None = None, minigrid: dict | None = None) -> dict:
    """RLlib IMPALA (RLLIB_CONFIG unless `config`) until the mean return reaches `target` (if `stop_at_target`),
    `budget_s` of training or `budget_steps` env steps sampled; `minigrid`: the MiniGrid env creator's
    arguments (RLLIB_SCRIPT)."""
    config = RLLIB_CONFIG if config is None else config
    install = ensure_rllib_venv(venv, minigrid=minigrid is not None)
    args = dict(config, budget_s=budget_s, target=target if stop_at_target else None, budget_steps=budget_steps,
                minigrid=minigrid)
    tmp = Path(tempfile.mkdtemp(prefix="bench_vs_rllib_rllib_"))
    script, log_path = tmp / "rllib_impala.py", tmp / "rllib.log"
    script.write_text(RLLIB_SCRIPT)
    print(f"[rllib] IMPALA {json.dumps(config)}", flush=True)
    launched = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.Popen([str(venv / "bin" / "python"), str(script), json.dumps(args)], cwd=tmp, stdout=log,
                                stderr=subprocess.STDOUT, env=child_env(), start_new_session=True)
    lines: list[dict] = []
    try:
        deadline = launched + STARTUP_TIMEOUT_S + budget_s + 60
        while proc.poll() is None:
            time.sleep(0.5)
            new = [json.loads(x[len("RLLIB_JSON "):]) for x in log_path.read_text(errors="replace").splitlines()
                   if x.startswith("RLLIB_JSON ")]
            for d in new[len(lines):]:
                if "t" in d:
                    print(f"[rllib] t={d['t']:6.1f}s steps={int(d['env_steps'] or 0):>9,} "
                          f"return={d['episode_return_mean']}", flush=True)
            lines = new
            if time.time() > deadline:
                print("[rllib] past its deadline (waiting for resources?): stopping", flush=True)
                stop_process(proc, 30.0)
    finally:
        if proc.poll() is None:
            stop_process(proc, 30.0)
    stopped = time.time()
    lines = [json.loads(x[len("RLLIB_JSON "):]) for x in log_path.read_text(errors="replace").splitlines()
             if x.startswith("RLLIB_JSON ")]
    t0_wall = next((d["t0_wall"] for d in lines if "t0_wall" in d), None)
    iters = [d for d in lines if "t" in d]
    result = {"system": "rllib", "config": config, "install": install, "exit_code": proc.returncode,
              "startup_s": t0_wall - launched if t0_wall else None,
              "init_and_build_s": next((d["init_and_build_s"] for d in lines if "init_and_build_s" in d), None),
              "shutdown_s": stopped - (t0_wall + iters[-1]["t"]) if t0_wall and iters else None,
              "log": str(log_path)}
    if not iters:
        result.update(ok=False, error=f"no training iterations; log tail:\n{tail(log_path, 30)}")
        return result
    result.update(summarize([(d["t"], d["env_steps"] or 0, d["episode_return_mean"]) for d in iters], budget_s,
                            target))
    result["iterations"] = len(iters)
    if minigrid is not None:  # how many episodes the early mean returns rest on
        result["episodes_lifetime"] = [d.get("episodes") for d in iters]
    if proc.returncode != 0:
        result["warning"] = f"exit code {proc.returncode}; log tail:\n{tail(log_path)}"
    return result


# ----------------------------------------------------------------------------------------------- report


def fmt(x, spec: str = ",.0f", none: str = "-") -> str:
    return none if x is None else format(x, spec)


def cartpole_rows(results: dict) -> list[list]:
    rows = []
    for key in ("levelray", "rllib"):
        r = results.get(key)
        if r is None:
            continue
        if not r.get("ok"):
            rows.append([key, f"{NUM_ACTORS}x{ENVS_PER_ACTOR}", "FAILED", "", "", "", "", "", ""])
            continue
        reached = (f"{r['time_to_target_s']:.1f} s" if r["time_to_target_s"] is not None
                   else f"not in {r['budget_s']:.0f} s")
        rows.append([key, f"{NUM_ACTORS}x{ENVS_PER_ACTOR}", fmt(r["startup_s"], ".1f"), f"{r['train_wall_s']:.1f}",
                     f"{r['env_steps']:,}", fmt(r["steps_per_s_overall"]), fmt(r["steps_per_s_steady"]), reached,
                     f"{fmt(r['best_return'], '.1f')} / {fmt(r['final_return'], '.1f')}"])
    return rows


def targets(results: dict) -> dict:
    lr, rl = results.get("levelray") or {}, results.get("rllib") or {}
    out: dict = {}
    if lr.get("ok") and rl.get("ok") and rl["steps_per_s_overall"]:
        out["speedup_overall"] = lr["steps_per_s_overall"] / rl["steps_per_s_overall"]
        if rl["steps_per_s_steady"]:
            out["speedup_steady"] = lr["steps_per_s_steady"] / rl["steps_per_s_steady"]
        out["speedup_met"] = out["speedup_overall"] >= TARGET_SPEEDUP
    if lr.get("ok"):
        t = lr["time_to_target_s"]
        out["levelray_time_to_target_s"] = t
        out["time_to_target_met"] = t is not None and t <= TARGET_TIME_S
    return out


def print_targets(t: dict) -> None:
    if "speedup_overall" in t:
        steady = f", steady {t['speedup_steady']:.1f}x" if "speedup_steady" in t else ""
        print(f"target: levelray env steps/s >= {TARGET_SPEEDUP:.0f}x RLlib's: overall {t['speedup_overall']:.1f}x"
              f"{steady} -> {'MET' if t['speedup_met'] else 'NOT MET'}")
    if "time_to_target_met" in t:
        when = "not reached" if t["levelray_time_to_target_s"] is None else f"{t['levelray_time_to_target_s']:.1f} s"
        print(f"target: levelray mean return {TARGET_RETURN:.0f} within {TARGET_TIME_S:.0f} s: {when} -> "
              f"{'MET' if t['time_to_target_met'] else 'NOT MET'}")


def learner_ceiling() -> dict | None:
    path = ROOT / "benchmarks" / "out" / "bench_learner.json"
    try:
        results = json.loads(path.read_text())["results"]
    except (OSError, ValueError, KeyError):
        return None
    cnn = next((r for r in results if r.get("model") == "impala_cnn"), results[0] if results else None)
    if not cnn or "samples_per_s" not in cnn:
        return None
    return {"samples_per_s": cnn["samples_per_s"], "device": cnn.get("device"), "T": cnn.get("T"),
            "B": cnn.get("B"), "source": str(path.relative_to(ROOT))}


# ----------------------------------------------------------------------------------------------- MiniGrid


def minigrid_shape() -> tuple[int, int]:
    """levelray's minigrid preset on this machine: (actors, envs per actor); RLlib gets as many runners x envs."""
    from levelray.contracts.presets import PRESETS

    preset = PRESETS["minigrid"]
    actors = preset["actors.num_actors"]
    return (actors() if callable(actors) else int(actors)), int(preset["actors.envs_per_actor"])


def return_at(result: dict, steps: int) -> dict | None:
    """The first report at or after `steps` env steps (its mean return over the last 100 episodes), or None."""
    p = next((p for p in result.get("series", []) if p["env_steps"] >= steps), None)
    return None if p is None else dict(p)


def run_minigrid(args) -> dict:
    """levelray (one run per --level-strategies entry) then RLlib IMPALA on args.env, to args.steps env steps each
    or args.budget_s of training, whichever comes first; the load average before and after each run."""
    from levelray.families.minigrid import gymnasium_id

    name = args.env[len("minigrid:"):]
    gym_id = gymnasium_id(name)
    actors, envs = minigrid_shape()
    results: dict = {"env": args.env, "gymnasium_id": gym_id, "steps_budget": args.steps, "budget_s": args.budget_s,
                     "num_levels": args.num_levels, "report_target_return": args.target, "cpus": os.cpu_count(),
                     "envs": f"{actors}x{envs}", "load_at_start": os.getloadavg(), "runs": []}
    if not args.skip_levelray:
        for strategy in args.level_strategies.split(","):
            load0 = os.getloadavg()
            r = run_levelray(f"levelray-{strategy}",
                             ["--env", args.env, "--level-strategy", strategy, "--num-levels", str(args.num_levels),
                              "--start-level", "0", "--total-steps", str(args.steps), *shlex.split(args.levelray_args)],
                             args.budget_s, stop_at_target=False, target=args.target)
            r.update(level_strategy=strategy, envs=f"{actors}x{envs}", load_start=load0, load_end=os.getloadavg())
            results["runs"].append(r)
    if not args.skip_rllib:
        config = dict(RLLIB_CONFIG, env=gym_id, num_env_runners=actors, num_envs_per_env_runner=envs,
                      ray_init_num_cpus=actors + 2, model="RLlib default MLP encoder [256, 256] tanh on the flat 196")
        load0 = os.getloadavg()
        r = run_rllib(args.budget_s, Path(args.rllib_venv), config, target=args.target, stop_at_target=False,
                      budget_steps=args.steps,
                      minigrid={"wrapper": str(MINIGRID_WRAPPER), "gym_id": gym_id, "num_levels": args.num_levels,
                                "start_level": 0})
        r.update(level_strategy="random", envs=f"{actors}x{envs}", load_start=load0, load_end=os.getloadavg())
        results["runs"].append(r)
    results["load_at_end"] = os.getloadavg()
    ok = [r for r in results["runs"] if r.get("ok")]
    marks = sorted({args.steps * k // 4 for k in (1, 2, 3, 4)})
    if len(ok) >= 2:  # the most env steps every run has reached: returns compared where all have data
        marks = sorted(set(marks) | {min(r["env_steps"] for r in ok)})
    results["return_marks"] = marks
    for r in ok:
        r["return_at"] = {str(m): return_at(r, m) for m in marks}
    return results


def print_minigrid(results: dict) -> None:
    print()
    print(f"{results['env']} ({results['gymnasium_id']}), {results['num_levels']} training levels, "
          f"{results['envs']} envs, budget {results['steps_budget']:,} env steps or {results['budget_s']:.0f} s of "
          f"training, on {results['cpus']} CPUs (load average 1 min: {results['load_at_start'][0]:.1f} -> "
          f"{results['load_at_end'][0]:.1f})")
    rows = []
    for r in results["runs"]:
        label = f"{r['system']} ({r['level_strategy']})"
        load = f"{r['load_start'][0]:.1f} -> {r['load_end'][0]:.1f}"
        if not r.get("ok"):
            rows.append([label, r["envs"], "FAILED", "", "", "", "", "", "", load])
            continue
        rows.append([label, r["envs"], fmt(r["startup_s"], ".1f"), f"{r['train_wall_s']:.1f}", f"{r['env_steps']:,}",
                     fmt(r["steps_per_s_overall"]), fmt(r["steps_per_s_steady"]), fmt(r["env_steps_to_target"], ","),
                     fmt(r["final_return"], ".3f"), load])
    print_table(rows, ["system (levels)", "envs", "startup s", "train s", "env steps", "steps/s", "steady steps/s",
                       f"steps to return {results['report_target_return']}", "final return", "load 1-min"])
    marks = results["return_marks"]
    rows = []
    for r in results["runs"]:
        if r.get("ok"):
            cells = []
            for m in marks:
                a = r["return_at"][str(m)]
                cells.append("-" if a is None or a["episode_return_mean"] is None
                             else f"{a['episode_return_mean']:.3f} ({a['env_steps']:,})")
            rows.append([f"{r['system']} ({r['level_strategy']})", *cells])
    if rows:
        print("mean return (last 100 episodes) at the first report at or after N env steps (its env steps):")
        print_table(rows, ["system (levels)", *[f"{m:,}" for m in marks]])
    for r in results["runs"]:
        for k in ("error", "warning"):
            if r.get(k):
                print(f"{r['system']} ({r['level_strategy']}) {k}: {r[k]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="CartPole-v1",
                        help="CartPole-v1 (the comparison below) or minigrid:<name>, e.g. minigrid:DoorKey-6x6 "
                             "(the MiniGrid comparison instead)")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="training time budget per system (150; 40 quick; MiniGrid: 1000, 120 quick)")
    parser.add_argument("--quick", action="store_true", help="40 s budget, no procgen section")
    parser.add_argument("--steps", type=int, default=None,
                        help="MiniGrid: env-step budget per system (1,000,000; 60,000 quick)")
    parser.add_argument("--num-levels", type=int, default=200, help="MiniGrid: training levels (reset seeds 0..N-1)")
    parser.add_argument("--level-strategies", default="random",
                        help="MiniGrid: levelray runs, one per --level-strategy (comma-separated, e.g. "
                             "random,value_l1); RLlib always samples the levels uniformly")
    parser.add_argument("--target", type=float, default=0.8,
                        help="MiniGrid: mean return whose first env-step count is reported (no run stops at it)")
    parser.add_argument("--skip-rllib", action="store_true")
    parser.add_argument("--skip-levelray", action="store_true")
    parser.add_argument("--procgen", action=argparse.BooleanOptionalAction, default=None,
                        help="levelray on procgen:bigfish (default: on unless --quick)")
    parser.add_argument("--procgen-budget-s", type=float, default=60.0)
    parser.add_argument("--rllib-venv", default=str(RLLIB_VENV), help="RLlib venv (created if missing)")
    parser.add_argument("--levelray-args", default="",
                        help="extra `levelray train` flags for the CartPole (or MiniGrid) run (they override the "
                             "defaults above)")
    parser.add_argument("--json", default=None,
                        help="benchmarks/out/bench_vs_rllib.json (MiniGrid: bench_vs_rllib_minigrid.json)")
    args = parser.parse_args()
    if args.env.startswith("minigrid:"):
        if args.budget_s is None:
            args.budget_s = 120.0 if args.quick else 1000.0
        if args.steps is None:
            args.steps = 60_000 if args.quick else 1_000_000
        results = run_minigrid(args)
        print_minigrid(results)
        write_json(args.json or "benchmarks/out/bench_vs_rllib_minigrid.json", {"results": results},
                   benchmark="bench_vs_rllib_minigrid")
        return
    if args.env != "CartPole-v1":
        parser.error(f"--env must be CartPole-v1 or minigrid:<name>, got {args.env!r}")
    args.json = args.json or "benchmarks/out/bench_vs_rllib.json"
    budget = args.budget_s if args.budget_s is not None else (40.0 if args.quick else 150.0)
    do_procgen = args.procgen if args.procgen is not None else not args.quick

    results: dict = {"budget_s": budget, "target_return": TARGET_RETURN,
                     "targets_wanted": {"speedup": TARGET_SPEEDUP, "time_to_target_s": TARGET_TIME_S},
                     "load_at_start": os.getloadavg()}
    if not args.skip_levelray:
        results["levelray"] = run_levelray(
            "levelray", ["--env", "CartPole-v1", "--total-steps", "100000000", *shlex.split(args.levelray_args)],
            budget, stop_at_target=True)
    if not args.skip_rllib:
        results["rllib"] = run_rllib(budget, Path(args.rllib_venv))
    if do_procgen:
        pg = run_levelray("procgen", ["--env", "procgen:bigfish", "--num-actors", str(NUM_ACTORS),
                                      "--envs-per-actor", "16", "--model", "impala_cnn",
                                      "--total-steps", "1000000000"], args.procgen_budget_s, stop_at_target=False)
        pg["learner_ceiling"] = learner_ceiling()
        results["procgen"] = pg
    results["targets"] = targets(results)
    results["load_at_end"] = os.getloadavg()

    print()
    print(f"CartPole-v1, {NUM_ACTORS} actors x {ENVS_PER_ACTOR} envs each, budget {budget:.0f} s of training, "
          f"load average {results['load_at_start'][0]:.1f} -> {results['load_at_end'][0]:.1f} on {os.cpu_count()} CPUs")
    rows = cartpole_rows(results)
    if rows:
        print_table(rows, ["system", "envs", "startup s", "train s", "env steps", "steps/s", "steady steps/s",
                           f"return {TARGET_RETURN:.0f}", "best / final return"])
    for key in ("levelray", "rllib"):
        r = results.get(key) or {}
        for k in ("error", "warning"):
            if r.get(k):
                print(f"{key} {k}: {r[k]}")
    print_targets(results["targets"])
    if do_procgen:
        pg, ceil = results["procgen"], results["procgen"].get("learner_ceiling")
        print()
        if pg.get("ok"):
            ceiling = f"{ceil['samples_per_s']:,.0f}" if ceil else "- (run python -m benchmarks.bench_learner)"
            steady = pg["steps_per_s_steady"]
            share = f"{steady / ceil['samples_per_s']:.0%}" if ceil and steady is not None else "-"
            print_table([["impala_cnn", f"{NUM_ACTORS}x16", f"{pg['train_wall_s']:.1f}", f"{pg['env_steps']:,}",
                          fmt(pg["steps_per_s_overall"]), fmt(pg["steps_per_s_steady"]), ceiling, share,
                          fmt(pg["final_return"], ".2f")]],
                        ["procgen:bigfish (levelray)", "envs", "train s", "env steps", "steps/s", "steady steps/s",
                         "learner ceiling samples/s", "of ceiling", "final return"])
        else:
            print(f"procgen: FAILED: {pg.get('error')}")
    write_json(args.json, {"results": results}, benchmark="bench_vs_rllib")


if __name__ == "__main__":
    main()

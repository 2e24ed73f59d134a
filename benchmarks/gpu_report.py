"""The device run's report: `gpu.json` and `gpu.md` from what `benchmarks/gpu_run.sh` left in its work folder.

    python -m benchmarks.gpu_report --work DIR --out DIR

Reads the stages' exit codes and times (`stages.jsonl`), the CUDA tests' JUnit file (`pytest.xml`), the learner
benchmark's JSON (`gpu_learner.json`), each training run's `metrics.jsonl` (`runs/<name>/`) and the GPU's utilisation
sampled by `nvidia-smi` while it ran (`util-<name>.csv`); writes one JSON document and a markdown page of the same
numbers, and prints the page (a device call returns the end of its output). A stage that failed or was skipped is
reported as such, with its reason: nothing here assumes a stage ran.

Rates of a training run are measured between its first and last metrics record: the first comes after start-up
(the env vector's creation, the first update's kernel selection), which a run of minutes would not notice.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from benchmarks.common import write_json
from levelray.deploy.report.runs import read_records  # imports neither Ray nor an env library: the device has none

GOAL_MAZE_STEPS = 300_000  # env steps/s of the maze fast path with LSTM-256 on one H100/H200 (DCD's 163.84M in 9 min)
GOAL_CNN_SAMPLES = 20_000  # samples/s of the IMPALA CNN learner in bf16


def environment() -> dict[str, Any]:
    """torch, CUDA, the device and its bf16, numpy, and what `nvidia-smi` says of the card."""
    import numpy as np
    import torch

    info: dict[str, Any] = {"python": platform.python_version(), "numpy": np.__version__, "torch": torch.__version__,
                            "cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available()}
    if torch.cuda.is_available():
        info.update(device=torch.cuda.get_device_name(0), bf16=torch.cuda.is_bf16_supported(),
                    capability=".".join(map(str, torch.cuda.get_device_capability(0))))
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=20, check=True)
        info["nvidia_smi"] = smi.stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        info["nvidia_smi"] = f"unavailable ({type(exc).__name__})"
    return info


def stages(work: Path) -> list[dict[str, Any]]:
    path = work / "stages.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def tests(work: Path) -> dict[str, Any]:
    """Counts and the failures' names and first message lines from the JUnit file."""
    path = work / "pytest.xml"
    if not path.exists():
        return {"ran": False}
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    failed = []
    for case in suite.iter("testcase"):
        problem = case.find("failure") if case.find("failure") is not None else case.find("error")
        if problem is not None:
            message = (problem.get("message") or problem.text or "").strip().splitlines()
            failed.append({"test": case.get("name"), "message": message[0][:300] if message else ""})
    return {"ran": True, **{k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")},
            "failed": failed}


def training_run(run_dir: Path, util_csv: Path) -> dict[str, Any]:
    """Env steps/s and trained steps/s between the first and last metrics records, and the GPU's utilisation."""
    records = read_records(run_dir, missing_ok=True)
    if len(records) < 2:
        return {"ran": False, "records": len(records)}
    first, last = records[0], records[-1]
    seconds = last["time"] - first["time"]
    out = {"ran": True, "records": len(records), "seconds": seconds, "env_steps": last["env_steps"],
           "samples_trained": last["samples_trained"], "learner_version": last["learner_version"],
           "env_steps_per_s": (last["env_steps"] - first["env_steps"]) / seconds,
           "trained_steps_per_s": (last["samples_trained"] - first["samples_trained"]) / seconds,
           "updates_per_s": (last["learner_version"] - first["learner_version"]) / seconds,
           "episode_return_mean": last.get("episode_return_mean"), "policy_lag_mean": last.get("policy_lag_mean")}
    return {**out, **utilisation(util_csv)}


def utilisation(path: Path) -> dict[str, Any]:
    """Mean and max GPU utilisation (%) and the most memory used (MiB) from `nvidia-smi`'s samples."""
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rows.append([float(x) for x in line.split(",")[:2]])
            except ValueError:
                continue
    if not rows:
        return {"gpu_util_mean": None, "gpu_util_max": None, "gpu_memory_mib_max": None}
    util = [r[0] for r in rows]
    return {"gpu_util_mean": sum(util) / len(util), "gpu_util_max": max(util),
            "gpu_memory_mib_max": max(r[1] for r in rows)}


RUNS = {  # gpu_run.sh's training runs: name -> what it is
    "maze_wide": "maze:13x13, LSTM-256, the fast path wide: 4096 envs x 20 steps a batch (81,920 samples)",
    "maze_dcd": "maze:13x13, LSTM-256, DCD's shapes: 32 envs x 256 steps a batch (8,192 samples, BPTT 256)",
    "procgen_bigfish": "procgen BigFish, the main job's IMPALA CNN and PLR over 200 levels, 256 envs",
}


def goals(learner: dict[str, Any], runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The two goals (`GOAL_MAZE_STEPS`, `GOAL_CNN_SAMPLES`) against what was measured: the best maze fast path,
    the best bf16 CNN update."""
    maze = max((r.get("env_steps_per_s", 0.0) for k, r in runs.items() if k.startswith("maze")), default=None)
    cnn = max((r["samples_per_s"] for r in learner.get("updates", [])
               if r.get("model") == "impala_cnn" and r.get("precision") == "bf16" and r.get("samples_per_s")),
              default=None)
    return {"maze_env_steps_per_s": maze, "maze_goal": GOAL_MAZE_STEPS,
            "maze_met": None if maze is None else maze >= GOAL_MAZE_STEPS,
            "impala_cnn_bf16_samples_per_s": cnn, "impala_cnn_goal": GOAL_CNN_SAMPLES,
            "impala_cnn_met": None if cnn is None else cnn >= GOAL_CNN_SAMPLES}


def report(work: Path) -> dict[str, Any]:
    learner_path = work / "gpu_learner.json"
    learner = json.loads(learner_path.read_text()) if learner_path.exists() else {}
    runs = {name: training_run(work / "runs" / name, work / f"util-{name}.csv") for name in RUNS}
    skipped = work / "skipped.txt"
    return {"environment": environment(), "stages": stages(work), "tests": tests(work),
            "learner": learner, "runs": runs, "run_descriptions": RUNS,
            "skipped": skipped.read_text().splitlines() if skipped.exists() else [],
            "goals": goals(learner, runs)}


def _num(x: Any, digits: int = 0) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _header(doc: dict[str, Any]) -> list[str]:
    env, t = doc["environment"], doc["tests"]
    lines = [f"# Device run: {env.get('device', 'no CUDA device')} ({env.get('nvidia_smi', '')})", "",
             f"torch {env['torch']}, CUDA {env['cuda']}, numpy {env['numpy']}, Python {env['python']}, "
             f"bf16 {env.get('bf16')}", "", "| stage | rc | s |", "|---|---|---|"]
    lines += [f"| {s['stage']} | {s['rc']} | {s['seconds']} |" for s in doc["stages"]]
    lines += ["", f"CUDA tests: {t.get('tests', 0)} run, {t.get('failures', 0)} failed, {t.get('errors', 0)} errors, "
              f"{t.get('skipped', 0)} skipped" if t.get("ran") else "CUDA tests: did not run"]
    return lines + [f"- FAILED {f['test']}: {f['message']}" for f in t.get("failed", [])]


def _runs(doc: dict[str, Any]) -> list[str]:
    lines = ["", "| run | env steps/s | trained steps/s | updates/s | GPU util mean/max % | GPU MiB |",
             "|---|---|---|---|---|---|"]
    for name, r in doc["runs"].items():
        if not r.get("ran"):
            lines.append(f"| {name} | did not run | | | | |")
            continue
        lines.append(f"| {name} | {_num(r['env_steps_per_s'])} | {_num(r['trained_steps_per_s'])} | "
                     f"{_num(r['updates_per_s'], 2)} | {_num(r['gpu_util_mean'])}/{_num(r['gpu_util_max'])} | "
                     f"{_num(r['gpu_memory_mib_max'])} |")
    return lines


def _learner(learner: dict[str, Any]) -> list[str]:
    lines = ["", "| learner update | lstm | T x B | precision | compile | samples/s | peak MB |",
             "|---|---|---|---|---|---|---|"]
    for r in learner.get("updates", []):
        rate = _num(r.get("samples_per_s")) + (f" ({r['error'][:60]})" if r.get("error") else "")
        lines.append(f"| {r.get('model')} | {r.get('lstm')} | {r.get('T')} x {r.get('B')} | {r.get('precision')} | "
                     f"{r.get('compile')} | {rate} | {_num(r.get('peak_memory_mb'))} |")
    lines += ["", "| actor step | lstm | batch | precision | obs/s |", "|---|---|---|---|---|"]
    lines += [f"| {r.get('model')} | {r.get('lstm')} | {r.get('batch')} | {r.get('precision')} | "
              f"{_num(r.get('obs_per_s'))} |" for r in learner.get("inference", [])]
    copies = learner.get("host_to_device", {})
    lines += ["", "| copy to device | MB | method | GB/s |", "|---|---|---|---|"]
    lines += [f"| {r.get('data')} | {r.get('MB')} | {r.get('method')} | {_num(r.get('gb_per_s'), 2)} |"
              for r in copies.get("copies", [])]
    return lines + ["", f"overlap of a pinned copy with compute: {copies.get('overlap', {}).get('overlap_fraction')}"]


def markdown(doc: dict[str, Any]) -> str:
    """The report as a markdown page: stages, tests, training runs, learner benchmark, goals."""
    g = doc["goals"]
    lines = [*_header(doc), *_runs(doc), *_learner(doc["learner"]), "",
             f"Goals: maze fast path {_num(g['maze_env_steps_per_s'])} env steps/s (goal {g['maze_goal']:,}: "
             f"{g['maze_met']}); IMPALA CNN bf16 {_num(g['impala_cnn_bf16_samples_per_s'])} samples/s (goal "
             f"{g['impala_cnn_goal']:,}: {g['impala_cnn_met']})"]
    return "\n".join(lines + [f"- skipped: {line}" for line in doc["skipped"]]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", required=True, help="gpu_run.sh's work folder")
    parser.add_argument("--out", required=True, help="where gpu.json and gpu.md go")
    args = parser.parse_args()
    doc = report(Path(args.work))
    write_json(Path(args.out) / "gpu.json", doc, benchmark="gpu_run")
    page = markdown(doc)
    (Path(args.out) / "gpu.md").write_text(page)
    print(page)


if __name__ == "__main__":
    main()

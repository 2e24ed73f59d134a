"""The device run, `benchmarks/gpu_run.sh`, in its quick mode on the CPU (`--device cpu --quick`): it runs on a lent
GPU machine once a lease, so every stage, section and case is checked here first, with the same files and JSON keys
it writes there: the stages' exit codes, the CUDA tests' report (all skipped here), the learner benchmark's document
(`benchmarks/gpu_learner.py`) and the training runs' rates in `gpu.json` and `gpu.md`."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# (model, lstm, B, precision, compile) of the quick run: B=32, both precisions, torch.compile for the MLP only
QUICK_UPDATES = {(model, lstm, 32, precision, False) for model, lstm in
                 [("impala_cnn", 0), ("minigrid_cnn", 0), ("minigrid_cnn", 256), ("mlp", 0)]
                 for precision in ("fp32", "bf16")} | {("mlp", 0, 32, p, True) for p in ("fp32", "bf16")}
QUICK_INFERENCE = {(model, lstm, batch, precision) for model, lstm in
                   [("impala_cnn", 0), ("minigrid_cnn", 0), ("minigrid_cnn", 256), ("mlp", 0)]
                   for batch in (16, 64) for precision in ("fp32", "bf16")}
ENVIRONMENT_KEYS = {"torch", "cuda", "device_name", "bf16_supported", "memory_total_mb", "sms", "torch_threads"}
RUNS = ("maze_wide", "maze_dcd", "procgen_bigfish")


def _positive(x: object) -> bool:
    return isinstance(x, int | float) and math.isfinite(x) and x > 0


@pytest.fixture(scope="module")
def device_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gpu")
    env = {**os.environ, "PYTHON": sys.executable}
    proc = subprocess.run(["bash", "benchmarks/gpu_run.sh", "--device", "cpu", "--quick", "--out", str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:] + (out / "gpu_run.log").read_text()[-4000:]
    return out


@pytest.mark.timeout(300)
def test_the_quick_device_run_completes_every_stage(device_run):
    doc = json.loads((device_run / "gpu.json").read_text())
    stages = {s["stage"]: s["rc"] for s in doc["stages"]}
    assert stages.keys() >= {"tests", "learner", *RUNS}
    assert stages["tests"] == 0 and stages["learner"] == 0
    assert all(stages[run] in (0, 124) for run in RUNS), stages  # 124: stopped at its time limit, as planned
    assert doc["tests"]["ran"] and doc["tests"]["failures"] == doc["tests"]["errors"] == 0
    assert doc["tests"]["tests"] == doc["tests"]["skipped"] > 0  # no CUDA here: every GPU test skips
    for run in RUNS:
        r = doc["runs"][run]
        assert r["ran"] and _positive(r["env_steps_per_s"]) and _positive(r["trained_steps_per_s"]), (run, r)
    assert doc["goals"]["maze_env_steps_per_s"] == max(doc["runs"][r]["env_steps_per_s"] for r in RUNS[:2])
    page = (device_run / "gpu.md").read_text()
    assert "| maze_wide |" in page and "Goals: maze fast path" in page


@pytest.mark.timeout(300)
def test_the_learner_benchmark_measures_every_section(device_run):
    doc = json.loads((device_run / "gpu_learner.json").read_text())
    assert doc["benchmark"] == "gpu_learner" and doc["complete"] is True
    assert {"environment", "updates", "inference", "host_to_device", "peak_memory_mb"} <= doc.keys()
    assert ENVIRONMENT_KEYS <= doc["environment"].keys()
    assert doc["environment"]["device"] == "cpu" and doc["environment"]["sms"] is None
    assert doc["peak_memory_mb"] is None  # the CUDA allocator's, which the CPU has not

    updates = doc["updates"]
    assert {(r["model"], r["lstm"], r["B"], r["precision"], r["compile"]) for r in updates} == QUICK_UPDATES
    assert len(updates) == len(QUICK_UPDATES)
    # torch.compile on the CPU builds C++: without a compiler those rows record its error, as a failing case must
    no_compiler = not (shutil.which("c++") or shutil.which("g++"))
    failed = [r for r in updates if "error" in r and not (no_compiler and r["compile"])]
    assert not failed, failed
    for r in updates:
        assert r["T"] == 20 and r["peak_memory_mb"] is None
        if "error" not in r:
            assert _positive(r["samples_per_s"]) and _positive(r["update_ms"]) and r["warmup_s"] >= 0, r

    inference = doc["inference"]
    assert {(r["model"], r["lstm"], r["batch"], r["precision"]) for r in inference} == QUICK_INFERENCE
    for r in inference:
        assert "error" not in r and _positive(r["obs_per_s"]), r

    copies = doc["host_to_device"]["copies"]
    assert {(r["data"], r["method"]) for r in copies} == {("minigrid", "clone"), ("procgen", "clone")}
    assert {tuple(r["shape"]) for r in copies} == {(4096, 7, 7, 3), (256, 64, 64, 3)}
    assert all(_positive(r["gb_per_s"]) for r in copies)
    overlap = doc["host_to_device"]["overlap"]
    assert overlap["overlap_fraction"] is None and overlap["note"]

"""Cost of the model loss: one learner update (`LearnerCore.train`) with and without `--model-loss muzero`.

    python -m benchmarks.bench_model_loss [--device cpu|cuda] [--threads N] [--quick] [--json PATH]

At each family's default sizes: IMPALA CNN with the procgen preset (2 unrolls of 16 envs x 20 steps), the
MLP with the classic_control preset (8 unrolls of 8 envs), the MiniGrid net with the minigrid preset (2 unrolls
of 16 envs); the model loss at its defaults (32 sequences, K = 5, categorical heads, game-over head), and once
more with every option on (consistency term, reanalyse of half the batch, dynamic horizon), and once with one
optimiser for both losses (`shared_optimizer`, `--model-optimizer shared`; the default is a separate one).
The update is the real one: fresh synthetic unrolls (random observations, actions and rewards with a few
episode ends) go through the replay service core in process, which the model batch is sampled from. The arms
are measured in alternating blocks and the medians compared, so a change of load on a shared machine hits both
alike.
The model loss at its defaults is to cost at most 1.5x an update without it on CPU: the ratio to read here.

A fourth arm, `fixed_cost`, runs the model loss on one sequence with one hidden unit: next to no
arithmetic, so its time over `none` is the model loss's fixed cost per update (op dispatch, replay sampling,
targets, bookkeeping), which no choice of `model.batch_size` or `model.hidden_size` removes.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

from benchmarks.bench_learner import make_batch
from benchmarks.common import print_table, write_json
from levelray.contracts.config import RunConfig, replace_path, replace_paths
from levelray.contracts.presets import apply_preset
from levelray.contracts.spec import MINIGRID_OBS, EnvSpec
from levelray.deploy.training.components import make_replay
from levelray.learner.core import LearnerCore

CASES = {  # name: (env id for the preset, spec)
    "impala_cnn": ("procgen:bigfish", EnvSpec((64, 64, 3), "uint8", True, num_actions=15)),
    "mlp": ("CartPole-v1", EnvSpec((4,), "float32", True, num_actions=2)),
    "minigrid_cnn": ("minigrid:DoorKey-8x8", EnvSpec((7, 7, 4), "uint8", True, num_actions=7,
                                                    obs_encoding=MINIGRID_OBS)),
}
ARMS = ("none", "muzero", "shared_optimizer", "all_options", "fixed_cost")
COLUMNS = ["model", "arm", "device", ("columns", "B"), ("update_ms", "update ms"), ("ratio", "x no model"),
           "updates"]


def make_unroll(spec: EnvSpec, T: int, K: int, rng: np.random.Generator, actor: int) -> dict:
    """One actor's unroll as the replay service stores it (MiniGrid-sized symbol ids below 11)."""
    unroll = make_batch(spec, T, K, rng, obs_high=11)
    unroll["terminated"] = rng.random((T, K)) < 0.02
    return {**unroll, "level_seeds": np.zeros((T, K), dtype=np.int64),
            "level_replayed": np.zeros((T, K), dtype=bool), "env_ids": np.arange(K, dtype=np.int64),
            "policy_version": 0, "actor_id": actor}


def make_core(case: str, arm: str, device: str) -> tuple[LearnerCore, RunConfig]:
    env_id, spec = CASES[case]
    cfg = apply_preset(replace_path(RunConfig(), "env.id", env_id), set())
    cfg = replace_paths(cfg, {"learner.device": device, "learner.max_policy_lag": 10**9})
    if arm != "none":
        cfg = replace_path(cfg, "model_loss.loss", "muzero")
    if arm == "shared_optimizer":
        cfg = replace_path(cfg, "model_loss.optimizer", "shared")
    if arm == "fixed_cost":
        cfg = replace_paths(cfg, {"model_loss.batch_size": 1, "model_loss.hidden_size": 1})
    if arm == "all_options":
        cfg = replace_paths(cfg, {"model_loss.consistency_weight": 1.0, "model_loss.reanalyze_ratio": 0.5,
                                  "model_loss.max_bootstrap_age": 100.0})
    replay = make_replay(cfg) if cfg.model_loss.loss != "none" else None
    return LearnerCore(cfg, spec, replay=replay), cfg


def run_block(core: LearnerCore, cfg: RunConfig, spec: EnvSpec, rng: np.random.Generator, n: int) -> list[float]:
    times = []
    sync = torch.cuda.synchronize if core.learner.device.type == "cuda" else (lambda: None)
    for _ in range(n):
        fresh = [make_unroll(spec, cfg.actors.unroll_length, cfg.actors.envs_per_actor, rng, i)
                 for i in range(core.num_fresh)]
        sync()
        start = time.perf_counter()
        core.train(fresh)
        sync()
        times.append(time.perf_counter() - start)
    return times


def measure(case: str, device: str, blocks: int, per_block: int, arms: tuple[str, ...]) -> list[dict]:
    spec = CASES[case][1]
    cores = {arm: make_core(case, arm, device) for arm in arms}
    rng = np.random.default_rng(0)
    for core, cfg in cores.values():  # warm up, and fill replay past min_size so every model update samples
        run_block(core, cfg, spec, rng, max(3, cfg.replay.min_size // max(1, core.num_fresh) + 2))
    times: dict[str, list[float]] = {arm: [] for arm in arms}
    for _ in range(blocks):
        for arm, (core, cfg) in cores.items():
            times[arm] += run_block(core, cfg, spec, rng, per_block)
    base = float(np.median(times["none"]))
    rows = []
    for arm in arms:
        core, cfg = cores[arm]
        med = float(np.median(times[arm]))
        rows.append({"model": case, "arm": arm, "device": str(core.learner.device),
                     "columns": cfg.learner.batch_size * cfg.actors.envs_per_actor, "T": cfg.actors.unroll_length,
                     "model_batch": cfg.model_loss.batch_size if arm != "none" else 0, "update_ms": med * 1e3,
                     "ratio": med / base, "updates": len(times[arm]), "torch_threads": torch.get_num_threads()})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", default="benchmarks/out/bench_model_loss.json")
    parser.add_argument("--quick", action="store_true", help="fewer updates per arm (a smoke run)")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (1: steadier on a shared machine, where 2 threads wait on each other)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    results = []
    for case in args.cases.split(","):
        cnn = case == "impala_cnn" and args.device == "cpu"
        blocks, per_block = (1, 1) if args.quick else ((3, 2) if cnn else (5, 10))
        results += measure(case, args.device, blocks, per_block, ARMS)
    load_after = os.getloadavg()
    print_table(results, COLUMNS)
    print(f"load average (1, 5, 15 min): before {load_before}, after {load_after}; cores: {os.cpu_count()}")
    write_json(args.json, {"results": results, "loadavg_before": load_before, "loadavg_after": load_after},
               benchmark="bench_model_loss")


if __name__ == "__main__":
    main()

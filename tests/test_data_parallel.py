"""Several learners training one policy (learner/data_parallel.py): two real gloo ranks, each a process, against
one learner on the union of their batches."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from levelray.actors.envs import env_spec, make_env_vector
from levelray.actors.rollout import RolloutWorker
from levelray.contracts.config import RunConfig, replace_paths
from levelray.contracts.presets import apply_preset
from levelray.contracts.trajectory import stack_unrolls
from levelray.learner.learner import Learner

UPDATES = 10
RANK_SCRIPT = Path(__file__).with_name("data_parallel_rank.py")


def _cfg() -> RunConfig:
    cfg = apply_preset(replace_paths(RunConfig(), {"env.id": "CartPole-v1"}), set())
    return replace_paths(cfg, {"actors.envs_per_actor": 4, "learner.value_normalization": True})


def _unrolls(cfg: RunConfig, n: int, seed: int) -> list[dict]:
    """`n` consecutive unrolls of a fresh random-weight policy on CartPole."""
    worker = RolloutWorker(make_env_vector(cfg.env, cfg.actors.envs_per_actor, None, seed=seed),
                           cfg.actors.unroll_length, learner=cfg.learner, seed=seed)
    torch.manual_seed(seed)
    net = Learner(env_spec(cfg.env), cfg.learner, seed=seed).model
    worker.set_weights(0, {k: v.detach().numpy() for k, v in net.state_dict().items()})
    out = [worker.unroll() for _ in range(n)]
    worker.envs.close()
    return out


def _batches(cfg: RunConfig, masked: bool) -> list[list[dict]]:
    """Per update, one batch per rank; with `masked`, Robust-PLR-like masks training a different number of steps
    on each rank (and, at one update, none at all on rank 1)."""
    ranks = [_unrolls(cfg, UPDATES, seed=10 + r) for r in range(2)]
    rng = np.random.default_rng(0)
    out = []
    for k in range(UPDATES):
        per_rank = []
        for r in range(2):
            batch = stack_unrolls([ranks[r][k]])
            if masked:
                T, B = batch["rewards"].shape
                keep = 0.0 if (k == 3 and r == 1) else (0.3 if r == 0 else 0.8)
                batch["mask"] = rng.random((T, B)) < keep
            per_rank.append(batch)
        out.append(per_rank)
    return out


def _union(per_rank: list[dict]) -> dict:
    """One batch of both ranks' columns, rank 0's first."""
    batch = {key: np.concatenate([b[key] for b in per_rank], axis=1) for key in ("obs", "actions", "rewards",
                                                                                 "terminated", "truncated",
                                                                                 "behaviour_params")}
    if "mask" in per_rank[0]:
        batch["mask"] = np.concatenate([b["mask"] for b in per_rank], axis=1)
    if "core_state" in per_rank[0]:  # a recurrent policy's state at step 0, per column
        batch["core_state"] = np.concatenate([b["core_state"] for b in per_rank], axis=1)
        batch["core_inputs"] = np.concatenate([b["core_inputs"] for b in per_rank])
    finals = [(b["final_obs"], b["final_obs_index"]) for b in per_rank if b.get("final_obs") is not None
              and len(b["final_obs"])]
    if finals:
        offset = per_rank[0]["obs"].shape[1]
        batch["final_obs"] = np.concatenate([f for f, _ in finals])
        batch["final_obs_index"] = np.concatenate([
            idx + (np.array([0, offset]) if b is per_rank[1] else 0)
            for (f, idx), b in zip(finals, [b for b in per_rank if b.get("final_obs") is not None
                                            and len(b["final_obs"])], strict=True)])
    return batch


def _run_ranks(tmp_path: Path, inputs: dict) -> list[dict]:
    path = tmp_path / "inputs.pkl"
    path.write_bytes(pickle.dumps(inputs))
    store = tmp_path / "store"
    procs = [subprocess.Popen([sys.executable, str(RANK_SCRIPT), str(path), str(r), "2", str(store),
                               str(tmp_path / f"rank{r}.pkl")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for r in range(2)]
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0, out
    ranks = [pickle.loads((tmp_path / f"rank{r}.pkl").read_bytes()) for r in range(2)]
    for rank in ranks:  # a gloo thread alive at exit can abort the process as it drops a collective's tensor
        assert rank["gloo_threads_after_destroy"] == []
    return ranks


@pytest.mark.timeout(240)
@pytest.mark.parametrize("masked, lstm_size", [(False, 0), (True, 0), (False, 16)],
                         ids=["all steps", "robust plr masks", "lstm"])
def test_two_ranks_stay_identical_and_match_one_learner_on_the_union(tmp_path, masked, lstm_size):
    """After 10 updates both ranks hold bit-identical parameters and PopArt statistics, and match (within 1e-5)
    one learner trained on both ranks' batches side by side, in the same order: the union's mean, with each
    rank's gradient weighted by its share of the trained steps where masks make the shares differ. A recurrent
    policy's batches carry their core state per column: nothing else differs."""
    cfg = replace_paths(_cfg(), {"learner.lstm_size": lstm_size})
    spec = env_spec(cfg.env)
    batches = _batches(cfg, masked)
    ranks = _run_ranks(tmp_path, {"spec": spec, "learner": cfg.learner, "model_loss": None, "batches": batches})
    for name, p0 in ranks[0]["params"].items():
        assert torch.equal(p0, ranks[1]["params"][name]), name
    assert ranks[0]["popart"] == ranks[1]["popart"]
    single = Learner(spec, cfg.learner, seed=0)
    for per_rank in batches:
        single.update(_union(per_rank))
    for name, p in single.model.named_parameters():
        torch.testing.assert_close(ranks[0]["params"][name], p.detach(), rtol=0, atol=1e-5)
    assert ranks[0]["version"] == single.version == UPDATES
    assert ranks[0]["samples_trained"] == ranks[1]["samples_trained"] == single.samples_trained
    assert ranks[0]["popart"]["mu"] == pytest.approx(single.value_norm.mu, rel=1e-6)  # targets from params 1e-7 apart
    assert ranks[0]["popart"]["nu"] == pytest.approx(single.value_norm.nu, rel=1e-6)
    moved = sum(not torch.equal(p.detach(), q) for p, q in zip(Learner(spec, cfg.learner, seed=0).model.parameters(),
                                                               ranks[0]["params"].values(), strict=True))
    assert moved > 0


@pytest.mark.timeout(240)
def test_two_ranks_with_the_model_loss_stay_identical(tmp_path):
    """With the model loss (its own optimiser), each rank on its own model batch: after 10 updates the policy
    network and the model's modules are bit-identical on both ranks. At the first update only rank 0 has a model
    batch (replay fills at different times on each rank): no rank takes a model step then, the model's modules
    are unchanged by it, and the ranks stay identical."""
    from levelray.learner.model_loss import model_losses
    from tests.test_model_loss import _hand_batch, muzero_of

    cfg = replace_paths(_cfg(), {"model_loss.loss": "muzero", "model_loss.num_unroll_steps": 3,
                                 "model_loss.td_steps": 2})
    spec = env_spec(cfg.env)
    model_batches = [[_hand_batch(), None if k == 0 else _hand_batch()] for k in range(UPDATES)]
    inputs = {"spec": spec, "learner": cfg.learner, "model_loss": cfg.model_loss, "batches": _batches(cfg, False),
              "model_batches": model_batches}
    ranks = _run_ranks(tmp_path, inputs)
    assert any(name.startswith("model_loss.") for name in ranks[0]["params"])
    for name, p0 in ranks[0]["params"].items():
        assert torch.equal(p0, ranks[1]["params"][name]), name
    (tmp_path / "first").mkdir()
    first = _run_ranks(tmp_path / "first", {**inputs, "batches": inputs["batches"][:1],
                                            "model_batches": model_batches[:1]})
    fresh = Learner(spec, cfg.learner, seed=0, auxiliary=model_losses(cfg.model_loss))  # rank 0's, broadcast to 1
    for name, p in muzero_of(fresh).module.named_parameters():
        assert torch.equal(first[0]["params"][f"model_loss.{name}"], p.detach()), name
    assert any(not torch.equal(first[0]["params"][name], p.detach()) for name, p in fresh.model.named_parameters())

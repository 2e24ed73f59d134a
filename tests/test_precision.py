"""bf16 autocast in the learner and the actors (`policy.precision`, `learner.precision`).

bf16 runs on any CPU (PyTorch emulates it where the CPU has no bf16 instructions), so the numerical checks run
everywhere. Which hardware `auto` calls fast is read from the CPU's flags; the tests of that rule replace the
flags (the only stand-in here: CI's CPU may or may not have them).
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from benchmarks.bench_learner import make_batch
from levelray.actors.envs import make_env_vector
from levelray.actors.rollout import RolloutWorker
from levelray.contracts.config import EnvConfig, LearnerConfig
from levelray.contracts.spec import EnvSpec
from levelray.learner.learner import Learner
from levelray.policy import precision
from levelray.policy.precision import autocast, compute_dtype

CNN = EnvSpec((64, 64, 3), "uint8", True, num_actions=15)
MLP = EnvSpec((4,), "float32", True, num_actions=2)


@pytest.fixture
def cpu_flags(monkeypatch):
    """Set the CPU flags `bf16_is_fast` reads."""
    def set_flags(*flags: str) -> None:
        monkeypatch.setattr(precision, "_cpu_flags", lambda: frozenset(flags))
    return set_flags


def test_auto_is_bf16_only_for_the_networks_measured_faster_on_fast_bf16_hardware(cpu_flags):
    cpu = torch.device("cpu")
    cpu_flags("avx512f", "avx512_bf16")
    assert compute_dtype("auto", cpu, "impala_cnn") == torch.bfloat16
    assert compute_dtype("auto", cpu, "impala_cnn", inference=True) == torch.bfloat16
    assert compute_dtype("auto", cpu, "mlp") == compute_dtype("auto", cpu, "minigrid_cnn") == torch.float32
    assert compute_dtype("auto", cpu, "minigrid_cnn", inference=True) == torch.float32
    assert compute_dtype("fp32", cpu, "impala_cnn") == torch.float32
    cpu_flags("avx512f", "amx_bf16")
    assert compute_dtype("auto", cpu, "impala_cnn") == torch.bfloat16
    cpu_flags("avx2", "avx512f")  # no bf16 instructions: auto stays fp32, an explicit bf16 is honoured
    assert compute_dtype("auto", cpu, "impala_cnn") == torch.float32
    assert compute_dtype("bf16", cpu, "mlp") == torch.bfloat16
    with pytest.raises(ValueError, match="precision must be one of auto, fp32, bf16"):
        compute_dtype("fp16", cpu, "mlp")
    assert isinstance(autocast(cpu, torch.float32), type(autocast(cpu, torch.float32)))


def test_auto_keeps_a_gpus_actor_step_in_fp32_and_its_update_in_bf16(monkeypatch):
    """A GPU's actor step is launch-bound: bf16 there only adds casts (the IMPALA CNN's measured slower)."""
    monkeypatch.setattr(precision, "bf16_is_fast", lambda device: True)
    cuda = torch.device("cuda")
    assert compute_dtype("auto", cuda, "impala_cnn") == torch.bfloat16
    assert compute_dtype("auto", cuda, "impala_cnn", inference=True) == torch.float32
    assert compute_dtype("bf16", cuda, "impala_cnn", inference=True) == torch.bfloat16


def _learner(spec: EnvSpec, prec: str, lr: float = 2e-3) -> Learner:
    """Without PopArt: its statistics move with every batch, and the loss is then not a function of the weights."""
    return Learner(spec, LearnerConfig(precision=prec, learning_rate=lr, value_normalization=False), seed=0)


def _loss_fp32(learner: Learner, batch: dict) -> float:
    """The total loss on `batch` in fp32 with the learner's current weights (no update)."""
    probe = _learner(learner.spec, "fp32")
    probe.model.load_state_dict(learner.model.state_dict())
    with torch.no_grad():
        forward = probe._forward(batch)
        vt, _ = probe._targets(batch, forward)
        return float(probe._loss_terms(forward, vt, probe._weights(batch, vt))["total"])


@pytest.mark.parametrize("spec", [CNN, MLP], ids=["impala_cnn", "mlp"])
def test_a_bf16_update_moves_the_loss_as_fp32_does(spec):
    """Three updates on a fixed batch from the same weights: the fp32 loss afterwards has moved the same way in
    both precisions, by amounts within 10% of each other; the weight changes point the same way (cosine
    > 0.95); and everything that leaves the network (weights, Adam's moments, the per-step outputs) is float32.
    (An RL loss need not fall: V-trace's targets move with the weights.)"""
    batch = make_batch(spec, 5, 4, np.random.default_rng(1), obs_high=256)
    fp32, bf16 = _learner(spec, "fp32"), _learner(spec, "bf16")
    assert fp32.compute_dtype == torch.float32 and bf16.compute_dtype == torch.bfloat16
    start = {k: v.clone() for k, v in fp32.model.state_dict().items()}
    before = _loss_fp32(fp32, batch)
    for learner in (fp32, bf16):
        for _ in range(3):
            metrics = learner.update(batch).metrics
            assert np.isfinite(metrics["loss_total"])
    drop32, drop16 = before - _loss_fp32(fp32, batch), before - _loss_fp32(bf16, batch)
    assert abs(drop16 - drop32) <= 0.1 * abs(drop32) and abs(drop32) > 1e-3, (before, drop32, drop16)
    delta = {name: torch.cat([(lr.model.state_dict()[k] - start[k]).flatten() for k in start])
             for name, lr in (("fp32", fp32), ("bf16", bf16))}
    cosine = torch.nn.functional.cosine_similarity(delta["fp32"], delta["bf16"], dim=0)
    assert cosine > 0.95, float(cosine)
    assert all(p.dtype == torch.float32 for p in bf16.model.parameters())
    assert all(t.dtype == torch.float32 for s in bf16.optimizer.state.values() for t in s.values()
               if torch.is_tensor(t) and t.is_floating_point())
    outputs = bf16.update(batch).outputs
    assert outputs.advantages.dtype == outputs.values.dtype == outputs.dist_params.dtype == np.float32


def test_actor_inference_in_bf16_gives_float32_close_to_fp32():
    """The actors' torch network under bf16 autocast: float32 distribution parameters within bf16's rounding of
    fp32's (the behaviour policy V-trace corrects for is what the actor recorded)."""
    cfg = EnvConfig(id="procgen:bigfish", num_levels=10)
    workers = {p: RolloutWorker(make_env_vector(cfg, 3, None, seed=0), 4, learner=LearnerConfig(precision=p), seed=0)
               for p in ("fp32", "bf16")}
    weights = _learner(CNN, "fp32").get_weights()[1]
    obs = workers["fp32"].observation
    out = {}
    for p, worker in workers.items():
        worker.set_weights(1, weights)
        _, out[p] = worker.act(obs, greedy=True)
    assert out["bf16"].dtype == np.float32 and out["bf16"].shape == out["fp32"].shape
    np.testing.assert_allclose(out["bf16"], out["fp32"], atol=0.05)
    assert not np.array_equal(out["bf16"], out["fp32"])  # it did compute in bf16


@pytest.mark.skipif(not (shutil.which("c++") or shutil.which("g++")),
                    reason="torch.compile on CPU needs a C++ compiler")
@pytest.mark.timeout(300)
def test_a_compiled_learner_updates_as_the_eager_one():
    """`learner.compile`: two updates of the MLP through torch.compile give the eager learner's losses and
    weights (to float32 round-off), and its checkpoints keep the plain module's keys."""
    batch = make_batch(MLP, 5, 4, np.random.default_rng(2))
    eager, compiled = (Learner(MLP, LearnerConfig(compile=c), seed=0) for c in (False, True))
    for _ in range(2):
        a, b = eager.update(batch).metrics, compiled.update(batch).metrics
        assert b["loss_total"] == pytest.approx(a["loss_total"], rel=1e-5, abs=1e-6)
    for (ka, va), (kb, vb) in zip(eager.state_dict()["model"].items(), compiled.state_dict()["model"].items(),
                                  strict=True):
        assert ka == kb and not kb.startswith("_orig_mod")
        torch.testing.assert_close(vb, va, rtol=1e-5, atol=1e-6)

"""CUDA checks, run on a lent GPU machine (`pytest -m gpu`, through `benchmarks/gpu_run.sh`); skipped where torch sees
no GPU, as in CI. Each compares the CUDA path with the CPU one, which the rest of the suite checks.

- A learner update on cuda equals the cpu one for each network (IMPALA CNN, MiniGrid net with and without LSTM-256,
  MLP), fp32 and bf16: the losses and gradient norm within 1e-3 (fp32) and 3e-2 (bf16: bf16 operands on both sides,
  rounded differently), and the change of every parameter within 5% and 30% (Adam's first step is about
  lr * sign(gradient), so a gradient element near 0 that takes the other sign on the other device moves its
  parameter by 2 lr). TF32 is off in these tests (cuDNN's convolutions use it by default): they check the CUDA path
  computes the same function, not TF32's rounding.
- The LSTM core's fused calls on cuda get their weights as one buffer in cuDNN's layout (no copy and warning each
  call) and equal the cpu core's.
- A checkpoint saved on cuda loads on cpu and back, the weights and optimiser state unchanged.
- The inline fast path (`DevicePolicy` on cuda) makes the cpu path's unrolls for a fixed seed (actions and
  observations exactly, distribution parameters and values within float error), and its first update trains as the
  cpu one does.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from levelray.contracts.config import LearnerConfig, RunConfig, replace_paths

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on a lent GPU machine)")]

# (bench_learner case, lstm size, batch width B): the networks a learner trains
NETWORKS = [("impala_cnn", 0, 16), ("minigrid_cnn", 0, 32), ("minigrid_cnn", 256, 32), ("mlp", 0, 64)]
TOLERANCE = {"fp32": 1e-3, "bf16": 3e-2}
STEP_TOLERANCE = {"fp32": 0.05, "bf16": 0.3}


@pytest.fixture(autouse=True)
def no_tf32():
    before = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before
METRICS = ("loss_total", "loss_policy", "loss_value", "entropy", "grad_norm")


def _relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    expected = expected.double().cpu()
    return float((got.double().cpu() - expected).norm() / expected.norm().clamp_min(1e-12))


def _updated(device: str, model: str, lstm: int, B: int, precision: str) -> tuple[dict, dict, dict]:
    """One update of a fresh learner (seed 0) on `device`: (metrics, parameters before, parameters after), on cpu."""
    from benchmarks.bench_learner import CASES, OBS_HIGH, make_batch
    from levelray.learner.learner import Learner

    config = LearnerConfig(device=device, precision=precision, lstm_size=lstm, value_normalization=False)
    learner = Learner(CASES[model], config, seed=0)
    before = {k: v.detach().cpu().clone() for k, v in learner.model.state_dict().items()}
    batch = make_batch(CASES[model], 20, B, np.random.default_rng(1), OBS_HIGH.get(model, 256), lstm)
    metrics = learner.update(batch).metrics
    after = {k: v.detach().cpu().clone() for k, v in learner.model.state_dict().items()}
    return metrics, before, after


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("model, lstm, B", NETWORKS)
def test_a_learner_update_on_cuda_equals_the_cpu_one(model, lstm, B, precision):
    tol = TOLERANCE[precision]
    cpu, before_cpu, after_cpu = _updated("cpu", model, lstm, B, precision)
    cuda, before_cuda, after_cuda = _updated("cuda", model, lstm, B, precision)
    for name, value in before_cpu.items():  # the same initial network (seeded on the CPU, then moved)
        torch.testing.assert_close(before_cuda[name], value, rtol=0, atol=0, msg=name)
    for key in METRICS:
        assert cuda[key] == pytest.approx(cpu[key], rel=tol, abs=tol), key
    steps_cpu = torch.cat([(after_cpu[k] - before_cpu[k]).flatten() for k in before_cpu])
    steps_cuda = torch.cat([(after_cuda[k] - before_cuda[k]).flatten() for k in before_cpu])
    assert _relative_error(steps_cuda, steps_cpu) < STEP_TOLERANCE[precision]


def test_a_checkpoint_saved_on_cuda_loads_on_cpu_and_back(tmp_path):
    from benchmarks.bench_learner import CASES, make_batch
    from levelray.deploy.rundir import RunDir
    from levelray.learner.learner import Learner

    spec = CASES["minigrid_cnn"]
    trained = Learner(spec, LearnerConfig(device="cuda", lstm_size=256), seed=0)
    for _ in range(2):
        trained.update(make_batch(spec, 10, 8, np.random.default_rng(2), 6, 256))
    run = RunDir.start(tmp_path / "run")
    run.save_checkpoint(trained.version, trained.state_dict(), {})
    on_cpu = Learner(spec, LearnerConfig(device="cpu", lstm_size=256), seed=1)
    on_cpu.load_state_dict(run.load_latest_checkpoint("cpu")["learner"])
    back = Learner(spec, LearnerConfig(device="cuda", lstm_size=256), seed=2)
    back.load_state_dict(on_cpu.state_dict())
    assert on_cpu.version == back.version == trained.version == 2
    for name, value in trained.model.state_dict().items():
        assert on_cpu.model.state_dict()[name].device.type == "cpu"
        torch.testing.assert_close(on_cpu.model.state_dict()[name], value.cpu(), rtol=0, atol=0, msg=name)
        torch.testing.assert_close(back.model.state_dict()[name], value, rtol=0, atol=0, msg=name)
    moments = [s["exp_avg"] for s in back.optimizer.state_dict()["state"].values()]
    assert moments and all(m.device.type == "cuda" for m in moments)
    back.update(make_batch(spec, 10, 8, np.random.default_rng(3), 6, 256))  # trains on from there
    assert back.version == 3


def test_the_lstm_core_on_cuda_hands_cudnn_its_weights_in_one_chunk_and_equals_the_cpu_core():
    """cuDNN copies weights that are not one buffer in its layout on every fused call and warns ("not part of
    single contiguous chunk of memory"): the core's unroll on cuda (episode starts inside it: several calls) raises
    no such warning, and its outputs and weight gradients equal the cpu core's."""
    import warnings

    from levelray.policy.recurrent import LSTMCore

    torch.manual_seed(0)
    T, B, F, E, N = 40, 8, 12, 7, 64
    cores = {"cpu": LSTMCore(F, E, N)}
    cores["cuda"] = LSTMCore(F, E, N).cuda()
    cores["cuda"].load_state_dict(cores["cpu"].state_dict())
    features, extra = torch.randn(T, B, F), torch.randn(T, B, E)
    starts = torch.rand(T, B) < 0.05
    state = torch.randn(2, B, N)
    results = {}
    for device, core in cores.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            h, _ = core(features.to(device), extra.to(device), starts.to(device), state.to(device))
            (h * h).sum().backward()
        assert not [w for w in caught if "contiguous chunk" in str(w.message)], device
        results[device] = [h.detach().cpu(), *(p.grad.cpu() for p in core.cell.parameters())]
    for got, want in zip(results["cuda"], results["cpu"], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def _maze(lstm: int, K: int, T: int, device: str) -> RunConfig:
    return replace_paths(RunConfig(), {
        "env.id": "maze:13x13", "env.num_levels": 50, "env.max_episode_steps": 9, "learner.lstm_size": lstm,
        "actors.num_actors": 1, "actors.envs_per_actor": K, "actors.unroll_length": T, "learner.batch_size": 1,
        "learner.value_normalization": False, "learner.precision": "fp32", "learner.device": device,
        "backend": "inline", "seed": 5})


@pytest.mark.parametrize("lstm, K", [(256, 16), (256, 4096), (0, 16)])
def test_the_fast_path_on_cuda_makes_the_cpu_paths_unrolls(lstm, K):
    """The inline backend on cuda (workers act with the learner's network there, unrolls kept there) against the
    same backend on cpu, for a fixed seed: two unrolls, then the first update's metrics."""
    from levelray.deploy.training.inline import InlineBackend

    T = 12 if K <= 16 else 4
    cuda, cpu = InlineBackend(_maze(lstm, K, T, "cuda")), InlineBackend(_maze(lstm, K, T, "cpu"))
    assert cuda.acting_device.type == "cuda" and cuda.workers[0].model is cuda.core.learner.model
    for _ in range(2):
        got, expected = cuda.workers[0].unroll(), cpu.workers[0].unroll()
        assert got["obs"].device.type == "cuda" and got["behaviour_params"].device.type == "cuda"
        np.testing.assert_array_equal(got["actions"], expected["actions"])
        np.testing.assert_array_equal(got["obs"].cpu().numpy(), expected["obs"])
        np.testing.assert_allclose(got["behaviour_params"].cpu().numpy(), expected["behaviour_params"], atol=2e-4)
        np.testing.assert_allclose(cuda.workers[0].last_values, cpu.workers[0].last_values, atol=2e-4)
    got, expected = cuda.train_step(), cpu.train_step()
    for key in METRICS:
        assert got[key] == pytest.approx(expected[key], rel=1e-3, abs=1e-4), key
    cuda.close()
    cpu.close()

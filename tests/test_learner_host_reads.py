"""An update reads nothing back from the learner's device before its one read at the end (`Learner.settle`): on a
GPU each read (`.item()`, `float(tensor)`, `if tensor`, `.cpu()`, a boolean mask's index) makes the host wait for
every kernel queued before it. Checked here on the CPU, where nothing waits, by making every way of reading a
tensor's values on the host raise while `Learner.step` runs: the Python conversions, and, under a dispatch mode,
the ops whose output depends on values read on the host (`_local_scalar_dense`, `nonzero`, boolean indexing...).
The metrics read afterwards equal a float64 reference; a step whose loss or gradient is not finite is skipped on
the device (parameters and Adam's state unchanged before anything is read) and `settle` then raises as `update`
always has. The same on CUDA under `torch.cuda.set_sync_debug_mode("error")` (marked gpu: run on a lent GPU)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from levelray.contracts.config import LearnerConfig
from levelray.learner.learner import Learner, NonFiniteUpdate
from tests.test_learner import VEC, make_batch

# Python-level reads of a tensor's values on the host
READS = ("item", "tolist", "numpy", "cpu", "__float__", "__int__", "__bool__", "__index__", "__format__")
# ops whose result needs the values on the host (CUDA syncs on each)
READING_OPS = {"_local_scalar_dense", "nonzero", "masked_select", "is_nonzero", "equal", "allclose", "_unique2",
               "unique_dim", "unique_consecutive", "repeat_interleave", "bincount", "histc"}
MASK_INDEXING = {"index", "index_put", "index_put_", "_index_put_impl_"}


class HostRead(AssertionError):
    """A tensor was read on the host where nothing may be."""


class _ReadingOps(TorchDispatchMode):
    """Records (and refuses) every op that reads a tensor's values on the host."""

    def __init__(self, seen: list[str]):
        super().__init__()
        self.seen = seen

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        masked = name in MASK_INDEXING and any(isinstance(i, torch.Tensor) and i.dtype == torch.bool
                                               for i in (args[1] if len(args) > 1 else ()) if i is not None)
        if name in READING_OPS or masked:
            self.seen.append(f"aten.{name}")
            raise HostRead(f"aten.{name} reads a tensor on the host")
        return func(*args, **(kwargs or {}))


@contextmanager
def host_reads(refuse: bool = True) -> Iterator[list[str]]:
    """Every read of a tensor's values on the host inside the block, by name; `refuse`: each raises `HostRead`
    too (the list still holds one a caller caught). Without `refuse` only the Python-level reads are counted."""
    seen: list[str] = []
    own = {name: name in torch.Tensor.__dict__ for name in READS}
    originals = {name: getattr(torch.Tensor, name) for name in READS}

    def watched(name):
        def read(self, *args, **kwargs):
            seen.append(f"Tensor.{name}")
            if refuse:
                raise HostRead(f"Tensor.{name} reads a tensor on the host")
            return originals[name](self, *args, **kwargs)
        return read

    try:
        for name in READS:
            setattr(torch.Tensor, name, watched(name))
        if refuse:
            with _ReadingOps(seen):
                yield seen
        else:
            yield seen
    finally:
        for name in READS:
            if own[name]:
                setattr(torch.Tensor, name, originals[name])
            else:
                delattr(torch.Tensor, name)


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def reference_metrics(batch: dict, outputs, sigma: float, discount: float = 0.99) -> dict[str, float]:
    """The metrics `_metrics` and `_target_statistics` compute, in float64 NumPy from the batch and the update's
    outputs (values, V(final obs), targets as advantages + values, the learner's logits), with the head's sigma
    after the update (1 without PopArt) and the default clips (rho-bar and the policy gradient's at 1)."""
    T = batch["rewards"].shape[0]
    values = outputs.values.astype(np.float64)
    vs = outputs.advantages.astype(np.float64) + values[:T]
    logp = _log_softmax(outputs.dist_params.astype(np.float64))
    mu = _log_softmax(batch["behaviour_params"].astype(np.float64))
    taken = batch["actions"][..., None]
    log_rhos = (np.take_along_axis(logp, taken, -1) - np.take_along_axis(mu, taken, -1))[..., 0]
    rhos = np.exp(log_rhos)
    done = batch["terminated"] | batch["truncated"]
    discounts = np.where(done, 0.0, discount)
    vs_next = np.concatenate([vs[1:], values[T:]])
    rewards = batch["rewards"] + discount * outputs.final_values.astype(np.float64) * batch["truncated"]
    pg = np.minimum(rhos, 1.0) * (rewards + discounts * vs_next - values[:T])
    entropy = -(np.exp(logp) * logp).sum(-1).mean()
    policy = -(np.take_along_axis(logp, taken, -1)[..., 0] * pg / sigma).mean()
    value = 0.5 * (((vs - values[:T]) / sigma) ** 2).mean()
    return {
        "loss_policy": policy, "loss_value": value, "entropy": entropy,
        "loss_total": policy + 0.5 * value - 0.01 * entropy,
        "rho_mean": rhos.mean(), "rho_clipped_fraction": (rhos > 1.001).mean(),
        "explained_variance": 1.0 - np.var(vs - values[:T], ddof=1) / np.var(vs, ddof=1),
        "value_mean": values[:T].mean(), "behaviour_kl": -log_rhos.mean(),
    }


@pytest.mark.parametrize("popart", [False, True])
def test_an_update_reads_nothing_until_its_one_read_and_its_metrics_equal_a_float64_reference(popart):
    rng = np.random.default_rng(0)
    learner = Learner(VEC, LearnerConfig(value_normalization=popart), seed=0)
    learner.update(make_batch(rng))  # Adam's state and PopArt's statistics exist: the update that follows is steady
    batch = make_batch(rng, truncate_at=(2, 1))  # a truncated step: V(final obs) bootstraps it
    with host_reads() as seen:
        pending = learner.step(batch)
    assert seen == []
    with host_reads(refuse=False) as seen:
        result = learner.settle(pending)
    assert seen == ["Tensor.tolist"]  # the one read: whether the step was taken (and PopArt's statistics)
    assert learner.version == 2
    with host_reads(refuse=False) as seen:
        metrics = dict(result.metrics)
    assert seen.count("Tensor.tolist") == 1  # every metric in one copy (a scalar or two read where computed)
    sigma = learner.value_norm.sigma
    reference = reference_metrics(batch, result.outputs, sigma)
    for name, value in reference.items():
        assert metrics[name] == pytest.approx(value, rel=1e-5, abs=1e-6), name
    assert np.isfinite(metrics["grad_norm"]) and metrics["grad_norm"] > 0
    assert metrics["version"] == 2 and metrics["batch_steps"] == metrics["trained_steps"] == 24
    if popart:
        assert metrics["value_norm_mu"] == learner.value_norm.mu and metrics["value_norm_sigma"] == sigma
    np.testing.assert_array_equal(result.outputs.abs_td, np.abs(result.outputs.advantages))


def _state(learner: Learner) -> dict[str, torch.Tensor]:
    """Every parameter and every tensor of Adam's state, copied."""
    out = {f"param.{k}": v.detach().clone() for k, v in learner.model.state_dict().items()}
    for i, state in enumerate(learner.optimizer.state.values()):
        out.update({f"adam.{i}.{k}": v.clone() for k, v in state.items() if torch.is_tensor(v)})
    return out


@pytest.mark.parametrize("popart", [False, True])
@pytest.mark.parametrize("cause", ["loss", "gradient"])
def test_a_nonfinite_step_is_skipped_on_the_device_and_settle_raises(popart, cause):
    rng = np.random.default_rng(1)
    learner = Learner(VEC, LearnerConfig(value_normalization=popart), seed=0)
    learner.update(make_batch(rng))
    before, stats = _state(learner), learner.value_norm.state_dict()
    batch, hook = make_batch(rng), None
    if cause == "loss":
        batch["rewards"] = np.full_like(batch["rewards"], 3e38)  # finite, but the squared errors overflow
    else:  # a finite loss whose gradient is NaN in one parameter
        hook = next(learner.model.parameters()).register_hook(lambda g: g * float("nan"))
    with host_reads() as seen:
        pending = learner.step(batch)
    assert seen == []
    after = _state(learner)  # nothing read yet: the device alone decided not to step
    assert after.keys() == before.keys()
    for key, value in before.items():
        assert torch.equal(after[key], value), key
    assert not bool(pending.step.applied)
    with pytest.raises(NonFiniteUpdate, match=r"non-finite .* at learner version 1 \(update skipped\)") as info:
        learner.settle(pending)
    diverged = str(info.value).split(" at learner version")[0]  # "non-finite <names>"
    expected = "loss_total, loss_policy, loss_value, grad_norm" if cause == "loss" else "grad_norm"  # as ever
    assert diverged == f"non-finite {expected}"
    assert "grad_norm=nan" in str(info.value)
    assert learner.version == 1 and learner.value_norm.state_dict() == stats
    assert all(p.grad is None for p in learner.model.parameters())
    if hook is not None:
        hook.remove()
    assert learner.update(make_batch(rng)).metrics["version"] == 2  # the next good batch trains


def test_rmsprop_skips_a_nonfinite_step_too():
    """RMSprop has no fused kernel to hand the flag to: its step reads it on the host, and skips the same."""
    rng = np.random.default_rng(2)
    learner = Learner(VEC, LearnerConfig(optimizer="rmsprop"), seed=0)
    learner.update(make_batch(rng))
    before = _state(learner)
    with pytest.raises(NonFiniteUpdate):
        learner.update(dict(make_batch(rng), rewards=np.full((6, 4), 3e38, dtype=np.float32)))
    after = _state(learner)
    for key, value in before.items():
        assert torch.equal(after[key], value), key
    assert learner.version == 1


def test_the_core_keeps_the_metrics_on_the_device_until_its_stats_are_read():
    from levelray.contracts.config import RunConfig, replace_paths
    from levelray.learner.core import LearnerCore

    core = LearnerCore(replace_paths(RunConfig(), {"learner.batch_size": 1}), VEC)
    unroll = {**make_batch(np.random.default_rng(3), T=6, B=2), "policy_version": 0, "actor_id": 0,
              "episode_returns": np.zeros(0), "episode_lengths": np.zeros(0, dtype=np.int64)}
    with host_reads(refuse=False) as seen:
        metrics = core.train([unroll])
        assert metrics and "loss_total" in metrics and "learning_rate" in metrics  # names known, nothing read
    assert seen == ["Tensor.tolist"]  # the update's one read
    with host_reads(refuse=False) as seen:
        stats = core.stats()
    assert "Tensor.tolist" in seen and np.isfinite(stats["metrics"]["loss_total"])
    assert stats["metrics"]["learning_rate"] == core.cfg.learner.learning_rate and stats["metrics"]["version"] == 1


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on a lent GPU machine)")
@pytest.mark.parametrize("popart", [False, True])
def test_an_update_on_cuda_does_not_synchronise_until_settle(popart):
    """`torch.cuda.set_sync_debug_mode("error")` raises at any synchronising CUDA call inside `step`."""
    from benchmarks.bench_learner import CASES
    from benchmarks.bench_learner import make_batch as bench_batch

    spec = CASES["mlp"]
    learner = Learner(spec, LearnerConfig(device="cuda", value_normalization=popart), seed=0)
    rng = np.random.default_rng(4)
    learner.update(bench_batch(spec, 20, 32, rng))  # first-step allocations (Adam's state) out of the way
    batch = bench_batch(spec, 20, 32, rng)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        pending = learner.step(batch)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    result = learner.settle(pending)
    assert learner.version == 2 and np.isfinite(result.metrics["loss_total"])
    bad = dict(batch, rewards=np.full_like(batch["rewards"], 3e38))
    before = {k: v.clone() for k, v in learner.model.state_dict().items()}
    torch.cuda.set_sync_debug_mode("error")
    try:
        pending = learner.step(bad)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    with pytest.raises(NonFiniteUpdate):
        learner.settle(pending)
    for key, value in before.items():
        assert torch.equal(learner.model.state_dict()[key], value), key

"""The LSTM core's lanes (`policy.lanes`: each env's episode fragments side by side, in a few fused `torch.lstm`
calls) against the LSTM written out step by step in float64, with episodes starting at random steps, however the
lanes are chunked; the plan itself on a hand-worked unroll; and `learner.compile` with a recurrent network (its
torso and heads compiled), resets inside the unroll and bf16, against the eager learner."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from levelray.contracts.config import LearnerConfig
from levelray.contracts.spec import EnvSpec
from levelray.learner.learner import Learner
from levelray.policy.lanes import plan_lanes
from levelray.policy.recurrent import LSTMCore

F, E, N = 5, 3, 16


def _reference(core: LSTMCore, x: torch.Tensor, starts: torch.Tensor, state: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """The step loop the core ran before its segments, in float64 with the core's parameters as leaves:
    `x [T, B, F + E]` -> `(h, c) [T, B, N]`."""
    cell = core.cell
    w_ih, w_hh = cell.weight_ih.double(), cell.weight_hh.double()
    b = cell.bias_ih.double() + cell.bias_hh.double()
    h, c = state[0], state[1]
    hs, cs = [], []
    for t in range(x.shape[0]):
        keep = (~starts[t]).double()[:, None]
        xt = torch.cat([x[t, :, :-E], x[t, :, -E:] * keep], dim=1)
        i, f, g, o = (xt @ w_ih.T + (h * keep) @ w_hh.T + b).chunk(4, dim=1)
        c = torch.sigmoid(f) * c * keep + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        hs.append(h)
        cs.append(c)
    return torch.stack(hs), torch.stack(cs)


def _fragment_ends(starts: torch.Tensor) -> torch.Tensor:
    """`[T, B]`: the steps after which an env's fragment ends (an episode starts next, or the unroll ends)."""
    ends = torch.ones_like(starts)
    ends[:-1] = starts[1:]
    return ends


@pytest.mark.parametrize("call_cost", [0, 32, 1e9], ids=["a-call-per-length", "default", "one-call"])
@pytest.mark.parametrize("T, density", [(1, 0.0), (1, 0.5), (9, 0.0), (9, 0.1), (33, 0.05), (33, 0.5), (12, 1.0)])
def test_lanes_match_the_float64_step_loop_in_outputs_and_gradients(T, density, call_cost):
    torch.manual_seed(T)
    B = 6
    core = LSTMCore(F, E, N)
    starts = torch.rand(T, B) < density  # step 0 too: its reset comes with the state it is given
    features, extra = torch.randn(T, B, F, dtype=torch.float64), torch.randn(T, B, E, dtype=torch.float64)
    state = torch.randn(2, B, N, dtype=torch.float64)
    weights = torch.randn(T, B, N, dtype=torch.float64)
    cells = _fragment_ends(starts) & (torch.rand(T, B) < 0.5)  # the cell states a learner would keep
    plan = plan_lanes(starts.numpy(), cells.numpy(), call_cost)

    leaves = [features.float().requires_grad_(), extra.float().requires_grad_(), state.float().requires_grad_()]
    h, c = core(*leaves[:2], starts, leaves[2], plan)
    ((h.double() * weights).sum() + (c[cells].double() * weights[cells]).sum()).backward()
    grads = [p.grad for p in core.parameters()] + [leaf.grad for leaf in leaves]

    ref_core = LSTMCore(F, E, N).double()
    ref_core.load_state_dict(core.state_dict())
    ref_leaves = [t.clone().requires_grad_() for t in (features, extra, state)]
    ref_h, ref_c = _reference(ref_core, torch.cat(ref_leaves[:2], dim=-1), starts, ref_leaves[2])
    ((ref_h * weights).sum() + (ref_c[cells] * weights[cells]).sum()).backward()
    ref_grads = [p.grad for p in ref_core.parameters()] + [leaf.grad for leaf in ref_leaves]

    torch.testing.assert_close(h.double(), ref_h.detach(), rtol=0, atol=1e-5)
    torch.testing.assert_close(c[cells].double(), ref_c[cells].detach(), rtol=0, atol=1e-5)
    assert T == 1 or c[~cells].isnan().all()  # a fused call keeps no cell state but its last step's
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5)


def test_the_plan_of_a_hand_worked_unroll():
    """T = 4, B = 2: env 0 starts an episode at step 2, env 1 runs through. Fragments: env 0 steps 0-1 (length 2,
    from the given state), env 0 steps 2-3 (length 2, from zeros), env 1 steps 0-3 (length 4): lanes longest first,
    env 1's then env 0's two. Keeping env 0's cell state after step 1 forces a cut at lane time 2."""
    starts = np.array([[0, 0], [0, 0], [1, 0], [0, 0]], dtype=bool)
    cells = np.zeros_like(starts)
    cells[1, 0] = True
    plan = plan_lanes(starts, cells, call_cost=1e9)
    assert plan.chunks == ((2, 3), (2, 1))  # lane times 0-1 with all three lanes, then env 1's alone
    np.testing.assert_array_equal(plan.initial, [1, 0, 2])  # env 1's state, env 0's, zeros (row B)
    # computed rows: chunk 0 is [2 times, 3 lanes], chunk 1 [2 times, 1 lane]; unroll row t * B + b
    np.testing.assert_array_equal(plan.gather, [1, 0, 4, 3, 2, 6, 5, 7])
    np.testing.assert_array_equal(plan.scatter, [1, 0, 4, 3, 2, 6, 5, 7])
    np.testing.assert_array_equal(plan.cell_rows, [2])  # step 1 of env 0
    np.testing.assert_array_equal(plan.cell_sources, [1])  # chunk 0's final state of lane 1
    assert plan_lanes(starts, None, call_cost=1e9).chunks == ((4, 3),)  # no cut asked: one call, padded
    assert plan_lanes(starts, None, call_cost=0).chunks == ((2, 3), (2, 1))  # no padding
    long = plan_lanes(np.zeros((300, 2), dtype=bool))  # no start: calls of at most MAX_CALL_LENGTH (128)
    assert long.chunks == ((128, 2), (128, 2), (44, 2))
    with pytest.raises(ValueError, match="not at step 0 of env 0: no episode starts at step 1"):
        plan_lanes(starts, np.eye(4, 2, dtype=bool))


MAZE = EnvSpec((5, 5, 4), "uint8", True, num_actions=7, obs_encoding="minigrid")


def _batch(rng: np.random.Generator, T: int = 6, B: int = 4, lstm: int = 8) -> dict:
    """A maze-shaped recurrent batch with episodes ending mid-unroll, a truncated one among them."""
    terminated = rng.random((T, B)) < 0.2
    truncated = np.zeros((T, B), dtype=bool)
    truncated[2, 1] = True
    terminated[2, 1] = False
    return {"obs": rng.integers(0, 6, size=(T + 1, B, *MAZE.obs_shape), dtype=np.uint8),
            "actions": rng.integers(0, 7, size=(T, B)), "rewards": rng.normal(size=(T, B)).astype(np.float32),
            "terminated": terminated, "truncated": truncated,
            "behaviour_params": rng.normal(size=(T, B, 7)).astype(np.float32),
            "final_obs": rng.integers(0, 6, size=(1, *MAZE.obs_shape), dtype=np.uint8),
            "final_obs_index": np.array([[2, 1]]),
            "core_state": rng.normal(scale=0.1, size=(2, B, lstm)).astype(np.float32),
            "core_inputs": np.zeros((B, MAZE.core_input_size), dtype=np.float32)}


@pytest.mark.skipif(not (shutil.which("c++") or shutil.which("g++")),
                    reason="torch.compile on CPU needs a C++ compiler")
@pytest.mark.timeout(300)
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_compiled_recurrent_learner_updates_as_the_eager_one(precision):
    """`learner.compile` with an LSTM core: two updates (resets and a truncation inside the unroll) give the eager
    learner's losses and weights to float round-off (bf16: to bf16's), and the checkpoint keeps the module's keys.
    Compiling the maze net's torso and heads takes ~10-20 s on this project's CPU."""
    rng = np.random.default_rng(3)
    batches = [_batch(rng) for _ in range(2)]
    config = {"precision": precision, "lstm_size": 8, "model": "minigrid_cnn"}
    eager, compiled = (Learner(MAZE, LearnerConfig(compile=c, **config), seed=0) for c in (False, True))
    tol = {"rel": 1e-5, "abs": 1e-6} if precision == "fp32" else {"rel": 2e-2, "abs": 2e-3}
    for batch in batches:
        a, b = eager.update(batch).metrics, compiled.update(batch).metrics
        assert b["loss_total"] == pytest.approx(a["loss_total"], **tol)
    for (ka, va), (kb, vb) in zip(eager.state_dict()["model"].items(), compiled.state_dict()["model"].items(),
                                  strict=True):
        assert ka == kb and not kb.startswith("_orig_mod")
        torch.testing.assert_close(vb, va, rtol=tol["rel"], atol=tol["abs"])

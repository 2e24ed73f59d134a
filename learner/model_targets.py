"""Targets and masks for a MuZero-style latent-model auxiliary loss (Schrittwieser et al. 2020, appendix).

Pure functions on torch tensors, in the style of rlax: no modules, no state, no Ray, nothing imported
from the rest of levelray. Semantics follow ALF's MuZero representation learner
(`alf/algorithms/muzero_representation_learner.py`, `alf/algorithms/mcts_models.py: calc_loss`).

The model has a representation `h(x) -> s_0`, a dynamics function `g(s_k, a_{t+k}) -> (s_{k+1}, r_{k+1})`
and prediction heads `f(s_k) -> (v_k, p_k, terminal_k)`. For a window starting at stored step `t` it is
unrolled `K = num_unroll_steps` times along the actions actually taken, and step `k` of the unroll
stands for the state `x_{t+k}` (reached after actions `a_t .. a_{t+k-1}`). The loss is

    L = sum_{k=0}^{K} w_k * [ value_mask_k  * l_v(v_k, value_k)       + reward_mask_k   * l_r(r_k, reward_k)
                            + policy_mask_k * l_p(p_k, policy_k)      + terminal_mask_k * l_g(terminal_k)
                            + consistency_mask_k * l_c(s_k, h(x_{t+k})) ]

with `w = step_weights(K)` (1 for k = 0, 1/K after, so the whole unroll weighs as much as the root) and
`scale_gradient(s_{k+1}, 0.5)` after every dynamics step, which keeps the gradient reaching `h` bounded
however long the unroll is. Conventions shared by every function here:

- Time-major `[T, B]` for stored unrolls: `rewards[t]` is the reward after the action at step `t`,
  `terminated[t]` / `truncated[t]` (bool) say the episode ended after that action (gymnasium's flags),
  and `[T + 1, B]` tensors hold one entry per observation `x_0 .. x_T`.
- Everything that produces *targets* runs under `torch.no_grad()`: targets are not differentiated.
- Bad arguments raise `ValueError` naming the argument, before any arithmetic (`TypeError` for a
  `td_steps` that is not an integer at all).
"""

from __future__ import annotations

import functools
import math
import operator
from dataclasses import dataclass

import torch

__all__ = [
    "ModelTargets",
    "from_categorical",
    "inverse_value_transform",
    "linear_td_steps",
    "make_support",
    "nstep_returns",
    "scale_gradient",
    "step_weights",
    "two_hot",
    "value_transform",
    "window_targets",
]


def _shape(tensor: torch.Tensor) -> tuple[int, ...]:
    return tuple(tensor.shape)


def _require_integer(name: str, tensor: torch.Tensor) -> None:
    if tensor.dtype.is_floating_point or tensor.dtype.is_complex or tensor.dtype == torch.bool:
        raise ValueError(f"{name} must be an integer tensor, got dtype {tensor.dtype}")


# --------------------------------------------------------------------------------------------------
# n-step value targets
# --------------------------------------------------------------------------------------------------


def _horizons(td_steps: int | torch.Tensor, T: int, B: int, device: torch.device) -> tuple[torch.Tensor, int]:
    """`m [T, B]` (long) = min(td_steps, T - t), and the largest m (how many reward terms to sum)."""
    remaining = (T - torch.arange(T, device=device)).unsqueeze(1)  # [T, 1]: steps left after t, T - t
    if isinstance(td_steps, torch.Tensor) and td_steps.dim() > 0:
        if _shape(td_steps) != (T, B):
            raise ValueError(f"td_steps as a tensor must be [T, B] = {(T, B)}, got {_shape(td_steps)}")
        _require_integer("td_steps", td_steps)
        if bool((td_steps < 1).any()):
            raise ValueError(f"td_steps as a tensor must be >= 1 everywhere, got min {int(td_steps.min())}")
        m = torch.minimum(td_steps.to(device=device, dtype=torch.long), remaining)
        return m, int(m.max())
    try:
        steps = operator.index(td_steps)
    except TypeError:
        raise TypeError(f"td_steps must be an int or an integer tensor [T, B], got {type(td_steps).__name__}") from None
    if isinstance(td_steps, bool) or steps == 0 or steps < -1:
        raise ValueError(f"td_steps must be >= 1, or -1 for 'to the end of the sequence', got {td_steps!r}")
    if steps == -1:
        steps = T
    return remaining.clamp(max=steps).expand(T, B), min(steps, T)


@torch.no_grad()
def nstep_returns(
    rewards: torch.Tensor,
    discounts: torch.Tensor,
    values: torch.Tensor,
    *,
    td_steps: int | torch.Tensor,
) -> torch.Tensor:
    """n-step bootstrapped returns `z [T, B]`, MuZero's value target.

    Shapes: `rewards, discounts [T, B]`, `values [T + 1, B]` (V(x_0) .. V(x_T)); `td_steps` an int or an
    integer tensor `[T, B]` (a horizon per element, e.g. from `linear_td_steps`). For each `t`:

        m   = min(td_steps_t, T - t)                    (td_steps = -1: m = T - t)
        z_t = sum_{i=0}^{m-1} (prod_{j<i} discounts_{t+j}) * rewards_{t+i}
              + (prod_{j<m} discounts_{t+j}) * values_{t+m}

    The horizon is cut at the end of the stored sequence (bootstrapping from V(x_T)) instead of
    padding, so every z_t uses only data from this unroll. Episode ends enter only through `discounts`,
    exactly as in V-trace (`vtrace.episode_end_inputs`): a termination at t has `discounts_t = 0`, which
    zeroes every later reward and the bootstrap; a truncation has `discounts_t = 0` with
    `rewards_t <- rewards_t + gamma * V(x_final)` folded in, which bootstraps the cut-off episode from its
    real final observation and never from `x_{t+1}` (the next episode's first observation).

    Vectorised over `[T, B]` and the reward terms (`[T, B, min(td_steps, T)]` windows, no Python loop).
    Returns `rewards.dtype`.
    A per-element `td_steps` is checked (>= 1) on the host, which synchronises a GPU stream once.
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [T, B], got shape {_shape(rewards)}")
    T, B = rewards.shape
    if T < 1:
        raise ValueError("rewards must have at least one time step (T >= 1)")
    if not rewards.dtype.is_floating_point:
        raise ValueError(f"rewards must be a floating-point tensor, got dtype {rewards.dtype}")
    if _shape(discounts) != (T, B):
        raise ValueError(f"discounts must be [T, B] = {(T, B)} like rewards, got {_shape(discounts)}")
    if _shape(values) != (T + 1, B):
        raise ValueError(f"values must be [T + 1, B] = {(T + 1, B)} (V(x_0) .. V(x_T)), got {_shape(values)}")
    for name, tensor in (("discounts", discounts), ("values", values)):
        if tensor.dtype != rewards.dtype:
            raise ValueError(f"{name} must have the dtype of rewards ({rewards.dtype}), got {tensor.dtype}")
    m, max_m = _horizons(td_steps, T, B, rewards.device)

    # Every (t, i) term at once, `[T, B, max_m]` windows: rows t + i of `rewards`/`discounts` (zero rows
    # past T so that they exist for every t; a term with i >= m is never selected). A Python loop over i
    # cost ~8 small ops per term (40 at td_steps 5), where the cost of CartPole's update is the op count.
    pad = rewards.new_zeros(max_m - 1, B)
    windows = torch.cat([torch.stack([rewards, discounts]), torch.stack([pad, pad])], dim=1).unfold(1, max_m, 1)
    active = m.unsqueeze(-1) > torch.arange(max_m, device=rewards.device)  # [T, B, max_m]: i < m
    # prod_{j<=i} discounts_{t+j} over active terms (cumprod multiplies left to right, as a loop would)
    through = torch.where(active, windows[1], 1).cumprod(-1)
    before = torch.cat([torch.ones_like(through[..., :1]), through[..., :-1]], dim=-1)  # prod_{j<i}
    total = torch.where(active, before * windows[0], 0).sum(-1)
    bootstrap = values.gather(0, torch.arange(T, device=rewards.device).unsqueeze(1) + m)  # values_{t+m}
    return total + through[..., -1] * bootstrap


def linear_td_steps(
    age: torch.Tensor | float,
    *,
    max_td_steps: int,
    min_td_steps: int = 1,
    max_bootstrap_age: float,
) -> torch.Tensor:
    """Per-sample n-step horizon that shrinks linearly with the age of the data (long tensor, shape of `age`).

        td_steps = ceil(min_td_steps + (max_td_steps - min_td_steps) * relu(1 - age / max_bootstrap_age))

    Why: the rewards summed by an n-step return were collected by the policy of that time, so for old
    data the sum is off-policy for the current policy; bootstrapping earlier from a fresh value estimate
    (as EfficientZero and ALF do) trades that bias for the value function's. Fresh data (age 0) gets
    `max_td_steps`, data of age >= `max_bootstrap_age` gets `min_td_steps`. `age` is in any unit the
    caller likes (learner updates, policy versions) as long as `max_bootstrap_age` uses the same one.
    Computed in float64, so the result is exactly the formula evaluated with Python floats.
    """
    for name, value in (("max_td_steps", max_td_steps), ("min_td_steps", min_td_steps)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} must be an int, got {value!r}")
    if min_td_steps < 1:
        raise ValueError(f"min_td_steps must be >= 1, got {min_td_steps}")
    if max_td_steps < min_td_steps:
        raise ValueError(f"max_td_steps must be >= min_td_steps ({min_td_steps}), got {max_td_steps}")
    if not max_bootstrap_age > 0 or not math.isfinite(max_bootstrap_age):
        raise ValueError(f"max_bootstrap_age must be a positive finite number, got {max_bootstrap_age!r}")
    age = torch.as_tensor(age).to(torch.float64)
    if bool((age < 0).any()):
        raise ValueError("age must be >= 0 everywhere")
    fraction = torch.relu(1 - age / max_bootstrap_age)
    return torch.ceil(min_td_steps + (max_td_steps - min_td_steps) * fraction).long()


# --------------------------------------------------------------------------------------------------
# Value scaling and the categorical (two-hot) representation of scalars
# --------------------------------------------------------------------------------------------------


def value_transform(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """MuZero's invertible squashing `h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x` (elementwise).

    Why: values and rewards differ by orders of magnitude across environments; regressing on `h(x)`
    (roughly sqrt for large |x|, identity near 0, strictly increasing thanks to `eps x`) keeps the loss
    scale stable without reward clipping. `sqrt(|x| + 1) - 1` is evaluated as `|x| / (sqrt(|x| + 1) + 1)`
    to avoid cancellation near 0 in float32.
    """
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    ax = x.abs()
    return torch.sign(x) * (ax / (torch.sqrt(ax + 1) + 1)) + eps * x


def inverse_value_transform(y: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """Exact inverse of `value_transform` (MuZero appendix, "Network Architecture"):

        h^{-1}(y) = sign(y) * ( ((sqrt(1 + 4 eps (|y| + 1 + eps)) - 1) / (2 eps))^2 - 1 )

    evaluated in the algebraically equal form `sign(y) (s^2 - 1)`, `s = 2 (|y| + 1 + eps) / (1 + sqrt(1 +
    4 eps (|y| + 1 + eps)))`, which has no `0 / 0` at `eps = 0` and no cancellation for small `eps`.
    """
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    u = y.abs() + (1 + eps)
    s = 2 * u / (1 + torch.sqrt(1 + 4 * eps * u))
    return torch.sign(y) * ((s - 1) * (s + 1))


def make_support(
    support_size: int, *, step: float = 1.0, dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The `2 * support_size + 1` atoms `-S step, ..., S step` of MuZero's categorical value/reward heads.

    MuZero's atoms are the integers (`step` 1), made for returns up to hundreds (h(x) ~ sqrt(x)); where returns
    lie in [0, 1] (MiniGrid, mazes) h(x) stays below 0.42 and two atoms would take all the mass, so the head
    could say no more than a scalar. A smaller `step` spreads the same number of atoms over the range used."""
    if isinstance(support_size, bool) or not isinstance(support_size, int) or support_size < 1:
        raise ValueError(f"support_size must be an int >= 1, got {support_size!r}")
    if not (isinstance(step, int | float) and not isinstance(step, bool) and math.isfinite(step) and step > 0):
        raise ValueError(f"step must be a positive finite number, got {step!r}")
    return torch.arange(-support_size, support_size + 1, dtype=dtype, device=device) * step


def _check_support(support: torch.Tensor) -> None:
    if support.dim() != 1 or support.numel() < 2:
        raise ValueError(f"support must be 1-D with at least 2 atoms, got shape {_shape(support)}")
    if not bool((support[1:] > support[:-1]).all()):
        raise ValueError("support must be strictly increasing")


def two_hot(x: torch.Tensor, support: torch.Tensor, *, validate: bool = True) -> torch.Tensor:
    """Categorical target `[..., N]` whose expectation on `support [N]` is `x [...]` clipped to the support.

    `x` is clipped to `[support[0], support[-1]]` and its mass split linearly between the two neighbouring
    atoms `lo <= x <= hi`: `p(hi) = (x - lo) / (hi - lo)`, `p(lo) = 1 - p(hi)`. This is the unique
    distribution on two adjacent atoms with mean `x`, so a cross-entropy on it trains the head's
    expectation (`from_categorical`) towards `x`. Any strictly increasing support works. Pass values
    already squashed with `value_transform` when the head predicts in the transformed space.
    `validate=False` skips the support check (a host sync), for a caller that made it with `make_support`.
    """
    if validate:
        _check_support(support)
    n_atoms = support.numel()
    x = torch.clamp(x.to(support.dtype), min=support[0], max=support[-1])
    lower = (torch.searchsorted(support, x.contiguous(), right=True) - 1).clamp(0, n_atoms - 2)
    lo, hi = support[lower], support[lower + 1]
    upper_weight = (x - lo) / (hi - lo)
    probs = x.new_zeros(*x.shape, n_atoms)
    probs.scatter_(-1, lower.unsqueeze(-1), (1 - upper_weight).unsqueeze(-1))
    probs.scatter_(-1, (lower + 1).unsqueeze(-1), upper_weight.unsqueeze(-1))
    return probs


def from_categorical(probs: torch.Tensor, support: torch.Tensor, *, validate: bool = True) -> torch.Tensor:
    """Expectation `sum_i probs[..., i] * support[i]` -> `[...]`.

    `probs [..., N]` must be probabilities (apply `softmax` to a head's logits first); this is the scalar
    a categorical head predicts, still in the transformed space if the targets were `value_transform`ed
    (undo with `inverse_value_transform`). `validate=False` skips the support check, as for `two_hot`.
    """
    if validate:
        _check_support(support)
    if probs.shape[-1:] != support.shape:
        raise ValueError(f"probs must be [..., {support.numel()}] to match support, got {_shape(probs)}")
    return (probs * support.to(probs.dtype)).sum(-1)


# --------------------------------------------------------------------------------------------------
# Unroll mechanics
# --------------------------------------------------------------------------------------------------


def scale_gradient(x: torch.Tensor, scale: float) -> torch.Tensor:
    """Identity in the forward pass, `grad * scale` in the backward pass.

    MuZero scales the gradient entering the dynamics function by 1/2 at every unroll step: each latent
    `s_k` receives gradient from all later steps, and without the scaling the gradient reaching the
    representation network grows with `K`. Unlike `x * scale + x.detach() * (1 - scale)`, the forward
    value is bit-for-bit `x` for every `scale` (and stays finite where `x` is infinite).

    A view of `x` with a gradient hook, so only what reads the result is scaled, not other readers of `x`;
    a hook rather than an `autograd.Function`, whose Python node cost ~20 us per call forward and backward
    (the unroll calls this K times an update). `scale == 1` returns `x` itself.
    """
    if scale == 1.0:
        return x
    y = x.view_as(x)
    if y.requires_grad:
        y.register_hook(functools.partial(torch.mul, other=float(scale)))
    return y


def step_weights(
    num_unroll_steps: int, *, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
) -> torch.Tensor:
    """Per-step loss weights `[K + 1]`: 1 for the root (k = 0), `1 / K` for k = 1..K (ALF's `loss_scale`).

    The K unrolled steps together weigh as much as the root, so changing K does not change how much the
    model terms pull on the representation relative to the ordinary (k = 0) value/policy losses.
    `num_unroll_steps = 0` gives `[1.]`.
    """
    if isinstance(num_unroll_steps, bool) or not isinstance(num_unroll_steps, int) or num_unroll_steps < 0:
        raise ValueError(f"num_unroll_steps must be an int >= 0, got {num_unroll_steps!r}")
    weights = torch.full((num_unroll_steps + 1,), 1.0 / max(num_unroll_steps, 1), dtype=dtype, device=device)
    weights[0] = 1.0
    return weights


# --------------------------------------------------------------------------------------------------
# Per-window targets and masks
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelTargets:
    """Targets and masks of `n` windows for unroll steps k = 0..K; every field is `[n, K + 1]` (policy
    `[n, K + 1, A]`). Masks are floats 0/1 in the dtype of `rewards`, to multiply per-step losses
    (`mask.bool()` to index); `reward` and `value` keep the dtypes of `rewards` and `value_targets`. Targets
    are 0 wherever their mask is 0, so unused stored data (even NaN) never reaches a loss through them."""

    reward: torch.Tensor  # r after a_{t+k-1}; absorbing 0 after a termination
    value: torch.Tensor  # value_targets[t + k]; 0 at and after a termination
    terminal: torch.Tensor  # 1 at and after a termination (game over), else 0
    reward_mask: torch.Tensor
    value_mask: torch.Tensor
    policy_mask: torch.Tensor
    consistency_mask: torch.Tensor  # 1 where x_{t+k} is a stored observation of x_t's episode, k >= 1
    terminal_mask: torch.Tensor
    policy: torch.Tensor | None = None  # policy_targets[t + k] (probabilities), None without policy_targets


@torch.no_grad()
def window_targets(
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    value_targets: torch.Tensor,
    starts: torch.Tensor,
    columns: torch.Tensor,
    *,
    num_unroll_steps: int,
    policy_targets: torch.Tensor | None = None,
) -> ModelTargets:
    """Targets and masks for `n` windows `(starts[i], columns[i])` of a stored unroll batch.

    Shapes: `rewards, terminated, truncated [T, B]` (raw rewards, not the V-trace-folded ones: the reward
    head must predict the environment's reward); `value_targets [T + 1, B]` (e.g. `nstep_returns` for
    x_0 .. x_T); `starts, columns [n]` integers with `0 <= starts < T`, `0 <= columns < B`;
    `policy_targets` optional `[T, B, A]` or `[T + 1, B, A]` *probabilities* (softmax logits first).
    Returns `ModelTargets` with fields `[n, K + 1]`. Actions are not included: the caller feeds
    `actions[(starts + k).clamp(max=T - 1), columns]` into dynamics step k -> k + 1 (k < K). Where that
    index is past an episode end or past the stored data the action is arbitrary, and harmlessly so:
    every later target is either masked or absorbing (the same for any action).

    Step k of window (t, b) is the state x_{t+k}, reached after a_t .. a_{t+k-1}; its reward target is
    `rewards[t+k-1]`, its value target `value_targets[t+k]`, its policy target `policy_targets[t+k]`. The
    first episode end in the window, after the action at step j = t + k* - 1, decides the rest:

    | step                              | reward   | value    | terminal | policy | consistency |
    |-----------------------------------|----------|----------|----------|--------|-------------|
    | k = 0                             | - (0)    | z_t      | 0        | p_t    | - (0)       |
    | 1 <= k < k*, t + k <= T           | r        | z_{t+k}  | 0        | p      | x_{t+k}     |
    | k = k*, terminated at j           | r_j      | 0        | 1        | -      | -           |
    | k > k*, after a termination       | 0        | 0        | 1        | -      | -           |
    | k = k*, truncated at j            | r_j      | -        | -        | -      | -           |
    | k > k*, after a truncation        | -        | -        | -        | -      | -           |
    | t + k > T, no end before          | -        | -        | -        | -      | -           |

    ("-": mask 0, target 0.) Reasons and choices the caller must know:
    - A termination makes x_{t+k*} absorbing: the model must learn value 0, reward 0 and game over for
      every later imagined step. These targets need no stored data, so they hold even past the end of
      the stored sequence (t + k > T), unlike every other target.
    - A truncation only stops the *data*: the stored x_{t+k*} is the next episode's first observation
      and the true continuation is unknown, so nothing from k* on is trained except the reward r_j, which
      is the real reward of the last real transition (ALF also treats it as real). Its terminal target
      is masked too (the state was not terminal, but nothing after it is supervised).
    - Policy targets at t + k = T exist only when `policy_targets` has T + 1 rows; with T rows the policy
      mask is 0 there. Without `policy_targets` the policy mask is still given, as for T rows, for a
      caller that gathers its own policy targets at the stored steps 0 .. T-1.
    - The stored x_T exists (T + 1 observations), so consistency and value are trained up to t + k = T.
    - A termination and a truncation on the same step count as a termination (as in V-trace inputs).
    Vectorised over windows and steps (`[n, K + 1]` index gathers, no Python loop). Runs under no_grad.
    """
    _check_window_args(rewards, terminated, truncated, value_targets, starts, columns, num_unroll_steps,
                       policy_targets)
    T = rewards.shape[0]
    device, dtype = rewards.device, rewards.dtype
    K = num_unroll_steps
    policy_rows = T if policy_targets is None else policy_targets.shape[0]  # without targets: as for T rows
    # Every step of every window at once, [n, K + 1]: a loop over k cost ~30 small ops per step, ~60% of
    # the model loss's target time at CartPole's sizes (cProfile).
    offsets = torch.arange(K + 1, device=device)
    step = starts.to(device=device, dtype=torch.long).unsqueeze(1) + offsets  # t + k: observation index
    col = columns.to(device=device, dtype=torch.long).unsqueeze(1).expand_as(step)
    prev, real, term_here, trunc_here = _first_episode_end(terminated, truncated, step, col, offsets, T)
    absorbing = torch.cumsum(term_here, dim=1) > 0  # ended by a termination at or before k
    ended_terminated = absorbing & ~term_here  # ... strictly before k
    alive = (real & ~term_here & ~trunc_here) | (offsets == 0)  # x_t itself is a stored state of its episode
    reward = torch.where(real, rewards[prev, col], 0)
    value = torch.where(alive, value_targets[step.clamp(max=T), col], 0)
    policy_mask = alive & (step < policy_rows)
    value_mask = (alive | absorbing).to(dtype)
    policy = None
    if policy_targets is not None:
        policy = torch.where(policy_mask.unsqueeze(-1), policy_targets[step.clamp(max=policy_rows - 1), col], 0)
    # game over is known exactly where the value is (alive or absorbing): terminal_mask is value_mask
    return ModelTargets(reward=reward, value=value, terminal=absorbing.to(dtype),
                        reward_mask=(real | ended_terminated).to(dtype), value_mask=value_mask,
                        policy_mask=policy_mask.to(dtype), consistency_mask=(alive & (offsets > 0)).to(dtype),
                        terminal_mask=value_mask.clone(), policy=policy)


def _first_episode_end(terminated: torch.Tensor, truncated: torch.Tensor, step: torch.Tensor, col: torch.Tensor,
                       offsets: torch.Tensor, T: int) -> tuple[torch.Tensor, ...]:
    """For windows at observation indices `step [n, K + 1]` (t + k) of columns `col [n, K + 1]`: `prev`, the
    index of the transition into x_{t+k}; `real`, that transition is stored and belongs to x_t's episode (no
    episode end before k); and whether the first episode end of the window is a termination / a truncation
    on that transition (`[n, K + 1]` bool each)."""
    device = step.device
    prev = (step - 1).clamp(0, T - 1)  # the transition into x_{t+k} (k >= 1, t + k <= T)
    # An episode end on the transition into step k (k >= 1, inside the stored data); a termination and a
    # truncation on the same step count as a termination.
    in_data = (step <= T) & (offsets > 0)
    term_at = in_data & terminated.to(device).bool()[prev, col]
    trunc_at = in_data & truncated.to(device).bool()[prev, col] & ~term_at
    # Only the first end in a window counts: `real` is in_data with no end before k. in_data is monotone in k
    # (once past T, always past), so "no end before k" is an exclusive running OR of the ends.
    real = in_data & ~_exclusive_any(term_at | trunc_at)
    return prev, real, real & term_at, real & trunc_at


def _check_window_args(rewards: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor,
                       value_targets: torch.Tensor, starts: torch.Tensor, columns: torch.Tensor,
                       num_unroll_steps: int, policy_targets: torch.Tensor | None) -> None:
    """`window_targets`' argument checks: ValueError naming the argument, before any arithmetic."""
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [T, B], got shape {_shape(rewards)}")
    T, B = rewards.shape
    if T < 1:
        raise ValueError("rewards must have at least one time step (T >= 1)")
    if not rewards.dtype.is_floating_point:
        raise ValueError(f"rewards must be a floating-point tensor, got dtype {rewards.dtype}")
    for name, tensor in (("terminated", terminated), ("truncated", truncated)):
        if _shape(tensor) != (T, B):
            raise ValueError(f"{name} must be [T, B] = {(T, B)} like rewards, got {_shape(tensor)}")
    if _shape(value_targets) != (T + 1, B):
        raise ValueError(f"value_targets must be [T + 1, B] = {(T + 1, B)}, got {_shape(value_targets)}")
    if policy_targets is not None and (
        policy_targets.dim() != 3 or policy_targets.shape[0] not in (T, T + 1) or policy_targets.shape[1] != B
    ):
        raise ValueError(
            f"policy_targets must be [T, B, A] or [T + 1, B, A] with T={T}, B={B}, got {_shape(policy_targets)}"
        )
    if isinstance(num_unroll_steps, bool) or not isinstance(num_unroll_steps, int) or num_unroll_steps < 0:
        raise ValueError(f"num_unroll_steps must be an int >= 0, got {num_unroll_steps!r}")
    for name, tensor in (("starts", starts), ("columns", columns)):
        if tensor.dim() != 1:
            raise ValueError(f"{name} must be 1-D [n], got shape {_shape(tensor)}")
        _require_integer(name, tensor)
    if starts.shape != columns.shape:
        raise ValueError(f"starts {_shape(starts)} and columns {_shape(columns)} must have the same length n")
    for name, tensor, upper in (("starts", starts, T), ("columns", columns, B)):
        if tensor.numel() and (int(tensor.min()) < 0 or int(tensor.max()) >= upper):
            raise ValueError(f"{name} must lie in [0, {upper - 1}], got [{int(tensor.min())}, {int(tensor.max())}]")


def _exclusive_any(x: torch.Tensor) -> torch.Tensor:
    """`[n, S]` bool -> `[n, S]`: whether any of `x[:, :s]` is true (False at s = 0)."""
    seen = torch.cumsum(x, dim=1) > 0
    return torch.cat([torch.zeros_like(seen[:, :1]), seen[:, :-1]], dim=1)

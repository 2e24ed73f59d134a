"""The unroll: what an actor sends to the learner, and the check that rejects a malformed one.

An unroll of `T` steps from `K` environments is a dict of NumPy arrays (time-major):

    obs               [T+1, K, *obs_shape]   obs[T] is the bootstrap observation
    actions           [T, K] int64  |  [T, K, D] float32
    rewards           [T, K] float32
    terminated        [T, K] bool            the MDP ended after step t (discount 0)
    truncated         [T, K] bool            a time limit cut the episode after step t
    behaviour_params  [T, K, P] float32      logits, or (mean, log-std) for continuous actions
    level_seeds       [T, K] int64           the level each env really played at step t
    level_replayed    [T, K] bool            that level was a replay, chosen by the level service from its
                                             scored levels (False: a new level); Robust PLR trains on these only
    final_obs         [M, *obs_shape]        final observation of each truncated step (to bootstrap)
    final_obs_index   [M, 2] int64           (t, k) of each row of final_obs
    env_ids           [K] int64              globally unique env column ids (PLR stitches episodes by them)
    policy_version    int                    learner version of the weights that acted
    actor_id          int
    episode_returns, episode_lengths, episode_seeds   [E]   episodes that ended in this unroll
    episode_replayed  [E] bool               each of those episodes played a replayed level
    core_state        [2, K, N] float32      recurrent policies only (`learner.lstm_size` N > 0): the LSTM
                                             core's (h, c) at step 0, per env column, as step 0 reads it
                                             (zeros where step 0 begins an episode)
    core_inputs       [K, E] float32         recurrent policies only: the core's extra input at step 0, the
                                             previous action (one-hot, or the action vector) then the previous
                                             reward clipped to [-1, 1] (E = `EnvSpec.core_input_size`); zeros
                                             where step 0 begins an episode

An episode that a level window's end cut (`actors.level_windows`) ends with a truncated step but is not among the
unroll's episodes. The env steps and episodes of unrolls that stay on an actor (a Robust PLR explore window) reach
the learner as a `StepTally` instead, checked by `validate_tally`. The learner answers each submit with a `Receipt`.

obs[t+1] after a terminated/truncated step is already the first observation of the next episode.
A batch is the same dict with `K` replaced by `B` (several unrolls stacked along the env axis).

A recurrent policy's state at step t > 0 is not stored: the learner recomputes it from `core_state` and
`core_inputs`, steps 1..T reading `actions[t-1]` and `rewards[t-1]`, with a reset (zero state and extra input)
where step t-1 was terminated or truncated (`policy.recurrent`). A feed-forward policy's unrolls have neither
field, and a feed-forward learner refuses one that has them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, NotRequired, TypedDict

import numpy as np

from levelray.contracts.spec import EnvSpec


class Unroll(TypedDict):
    """The unroll's typed form (see the module docstring for shapes). A TypedDict rather than a class:
    it crosses Ray and msgpack as a plain dict of arrays, at no conversion cost, and type checkers still
    see every field. `validate_unroll` is what enforces it at run time."""

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    behaviour_params: np.ndarray
    level_seeds: np.ndarray
    level_replayed: np.ndarray
    final_obs: NotRequired[np.ndarray]
    final_obs_index: NotRequired[np.ndarray]
    env_ids: np.ndarray
    policy_version: int
    actor_id: int
    episode_returns: NotRequired[np.ndarray]
    episode_lengths: NotRequired[np.ndarray]
    episode_seeds: NotRequired[np.ndarray]
    episode_replayed: NotRequired[np.ndarray]
    core_state: NotRequired[np.ndarray]  # [2, K, N] float32, recurrent policies only: (h, c) at step 0
    core_inputs: NotRequired[np.ndarray]  # [K, E] float32, recurrent policies only: previous action and reward
    sample_weights: NotRequired[np.ndarray]  # [B], only on a learner batch: replay importance weights
    # final_obs/final_obs_index may be left out when nothing was truncated; the episode keys when no
    # episode ended (validate_unroll checks each one that is there); core_state and core_inputs are there
    # exactly when the policy has an LSTM core.


STEP_KEYS = ("actions", "rewards", "terminated", "truncated", "behaviour_params", "level_seeds", "level_replayed")
EPISODE_KEYS = ("episode_returns", "episode_lengths", "episode_seeds", "episode_replayed")
MAX_TALLY_STEPS = 1 << 40  # env steps one tally may carry
CORE_KEYS = ("core_state", "core_inputs")  # a recurrent policy's unrolls only


class TrajectoryError(ValueError):
    """An unroll does not have the documented form; the message names the field."""


def _expect(cond: bool, field: str, expected, got) -> None:
    """`expected` and `got` may be callables: the message is only built for a bad unroll, and the
    learner validates hundreds of good ones a second."""
    if not cond:
        expected = expected() if callable(expected) else expected
        got = got() if callable(got) else got
        raise TrajectoryError(f"unroll field {field!r}: expected {expected}, got {got}")


def _describe(arr) -> str:
    if isinstance(arr, np.ndarray):
        return f"{arr.dtype} array of shape {arr.shape}"
    return type(arr).__name__


def validate_unroll(
    unroll: Unroll,
    spec: EnvSpec,
    *,
    unroll_length: int | None = None,
    level_range: tuple[int, int] | None = None,
    current_version: int | None = None,
    core_size: int = 0,
) -> None:
    """Raise TrajectoryError naming the first field that does not match the contract.

    `level_range` is `[start, stop)` of the training level set (None: any non-negative seed);
    `current_version` rejects versions from the future (a version not yet published); `core_size` is the
    policy's `learner.lstm_size` (0: feed-forward, and `core_state`/`core_inputs` must be absent). The checks
    run in the order of the module docstring's table, so the error names the first bad field of it.
    """
    _expect(isinstance(unroll, dict), "unroll", "a dict of arrays", type(unroll).__name__)
    for key in ("obs", *STEP_KEYS, "env_ids", "policy_version", "actor_id"):
        _expect(key in unroll, key, "present", "missing")
    T, K = _check_obs_shape(unroll["obs"], spec, unroll_length)
    _check_actions(unroll, spec, T, K)
    rewards = _array(unroll, "rewards", (T, K), "f", "float")
    _expect(bool(np.isfinite(rewards).all()), "rewards", "finite values", "NaN or inf")
    terminated = _array(unroll, "terminated", (T, K), "b", "bool")
    truncated = _array(unroll, "truncated", (T, K), "b", "bool")
    dist_params = _array(unroll, "behaviour_params", (T, K, spec.policy_params), "f", "float")
    _expect(bool(np.isfinite(dist_params).all()), "behaviour_params", "finite values", "NaN or inf")
    _check_level_seeds(_array(unroll, "level_seeds", (T, K), "iu", "integer"), level_range)
    _check_replay_flags(_array(unroll, "level_replayed", (T, K), "b", "bool"), terminated | truncated)
    _check_ids_and_version(unroll, K, current_version)
    _check_final_obs(unroll, spec, truncated)
    obs = unroll["obs"]
    if np.issubdtype(obs.dtype, np.floating):
        _expect(bool(np.isfinite(obs).all()), "obs", "finite values", "NaN or inf")
    _check_episodes(unroll)
    _check_core(unroll, spec, K, core_size)


def _array(unroll: Unroll, key: str, shape: tuple[int, ...], kinds: str, dtype_name: str) -> np.ndarray:
    """`unroll[key]`, checked to be an array of `shape` whose dtype kind is one of `kinds`."""
    a = unroll[key]
    _expect(
        isinstance(a, np.ndarray) and a.shape == shape and a.dtype.kind in kinds,
        key,
        lambda: f"{dtype_name} array of shape {shape}",
        lambda: _describe(a),
    )
    return a


def _check_obs_shape(obs, spec: EnvSpec, unroll_length: int | None) -> tuple[int, int]:
    """`obs [T+1, K, *obs_shape]` of the spec's dtype; returns (T, K)."""
    _expect(
        isinstance(obs, np.ndarray) and obs.ndim == 2 + len(spec.obs_shape),
        "obs",
        lambda: f"[T+1, K, {', '.join(map(str, spec.obs_shape))}] array",
        lambda: _describe(obs),
    )
    _expect(
        obs.shape[2:] == tuple(spec.obs_shape) and obs.dtype == np.dtype(spec.obs_dtype),
        "obs",
        lambda: f"{spec.obs_dtype} [T+1, K, {', '.join(map(str, spec.obs_shape))}]",
        lambda: _describe(obs),
    )
    T, K = obs.shape[0] - 1, obs.shape[1]
    _expect(T >= 1 and K >= 1, "obs", "T+1 >= 2 and K >= 1", lambda: _describe(obs))
    if unroll_length is not None:
        _expect(unroll_length == T, "obs", lambda: f"T+1 = {unroll_length + 1} steps", lambda: _describe(obs))
    return T, K


def _check_actions(unroll: Unroll, spec: EnvSpec, T: int, K: int) -> None:
    """Discrete: integers `[T, K]` in `[0, num_actions)`; continuous: finite floats `[T, K, D]`."""
    if spec.discrete:
        actions = _array(unroll, "actions", (T, K), "iu", "integer")
        _expect(
            bool(((actions >= 0) & (actions < spec.num_actions)).all()),
            "actions",
            lambda: f"values in [0, {spec.num_actions})",
            lambda: f"range [{actions.min()}, {actions.max()}]",
        )
    else:
        actions = _array(unroll, "actions", (T, K, spec.action_dim), "f", "float")
        _expect(bool(np.isfinite(actions).all()), "actions", "finite values", "NaN or inf")


def _check_level_seeds(seeds: np.ndarray, level_range: tuple[int, int] | None) -> None:
    """Seeds in `[start, stop)` of the training level set, or any non-negative seed without one."""
    if level_range is not None:
        lo, hi = level_range
        bad = (seeds < lo) | (seeds >= hi)
        _expect(
            not bad.any(),
            "level_seeds",
            lambda: f"seeds in the level set [{lo}, {hi})",
            lambda: f"seed {int(seeds[bad][0])}",
        )
    else:
        _expect(bool((seeds >= 0).all()), "level_seeds", "non-negative seeds", lambda: f"min {seeds.min()}")


def _check_replay_flags(replayed: np.ndarray, dones: np.ndarray) -> None:
    """A level's flag is its episode's: within an unroll it changes only where the episode (and level) does."""
    changed = (replayed[1:] != replayed[:-1]) & ~dones[:-1]
    if changed.any():
        t, k = np.argwhere(changed)[0]
        _expect(False, "level_replayed", "one flag per episode (a change only after a terminated or truncated step)",
                f"a change at step {int(t) + 1} of env {int(k)} within an episode")


def _check_ids_and_version(unroll: Unroll, K: int, current_version: int | None) -> None:
    """K distinct `env_ids`; non-negative int `policy_version` and `actor_id`, the version a published one."""
    env_ids = _array(unroll, "env_ids", (K,), "iu", "integer")
    _expect(len(set(env_ids.tolist())) == K, "env_ids", "K distinct ids", "duplicates")
    for key in ("policy_version", "actor_id"):
        v = unroll[key]
        _expect(
            isinstance(v, int | np.integer) and not isinstance(v, bool) and v >= 0, key, "a non-negative int", repr(v)
        )
    if current_version is not None:
        _expect(
            int(unroll["policy_version"]) <= current_version,
            "policy_version",
            lambda: f"a published version <= {current_version}",
            unroll["policy_version"],
        )


def _check_final_obs(unroll: Unroll, spec: EnvSpec, truncated: np.ndarray) -> None:
    """One `final_obs` row per truncated step, with its `(t, k)` in `final_obs_index`."""
    n_trunc = int(truncated.sum())
    final_obs = unroll.get("final_obs")
    final_index = unroll.get("final_obs_index")
    if not n_trunc and final_obs is None:
        return
    obs_dtype = unroll["obs"].dtype
    _expect(
        isinstance(final_obs, np.ndarray)
        and final_obs.shape == (n_trunc, *spec.obs_shape)
        and final_obs.dtype == obs_dtype,
        "final_obs",
        lambda: f"{obs_dtype} [{n_trunc}, *obs_shape] (one row per truncated step)",
        lambda: _describe(final_obs),
    )
    _expect(
        isinstance(final_index, np.ndarray)
        and final_index.shape == (n_trunc, 2)
        and final_index.dtype.kind in "iu",
        "final_obs_index",
        lambda: f"int [{n_trunc}, 2]",
        lambda: _describe(final_index),
    )
    if n_trunc:
        T, K = truncated.shape
        t, k = final_index[:, 0], final_index[:, 1]
        in_range = (t >= 0).all() and (t < T).all() and (k >= 0).all() and (k < K).all()
        _expect(
            bool(in_range) and bool(truncated[np.clip(t, 0, T - 1), np.clip(k, 0, K - 1)].all()),
            "final_obs_index",
            "the (t, k) of truncated steps",
            "indices of non-truncated steps",
        )


def _check_episodes(unroll: Unroll) -> None:
    """Each episode key that is there is a 1-d array; episode returns are finite."""
    for key in EPISODE_KEYS:
        if key in unroll:
            a = unroll[key]
            _expect(isinstance(a, np.ndarray) and a.ndim == 1, key, "a 1-d array", _describe(a))
    if "episode_returns" in unroll:
        _expect(bool(np.isfinite(unroll["episode_returns"]).all()), "episode_returns", "finite values", "NaN or inf")


class StepTally(TypedDict):
    """The env steps and finished episodes of unrolls an actor kept (`actors.level_windows.ExploreTally`):
    `env_steps` (a count), `episode_returns [E]` float64 and `episode_lengths [E]` int64."""

    env_steps: int
    episode_returns: np.ndarray
    episode_lengths: np.ndarray


class Receipt(NamedTuple):
    """The learner's answer to an actor's submit: its latest `version`, `weights` (`[ObjectRef]` to them, boxed so
    that Ray passes the reference, not the value), and whether the run's budget is spent (`budget_spent`:
    `learner.service` explains why the actors learn it here). A bare `(version, weights)`, as
    `latest_weights` answers, reads as not spent."""

    version: int
    weights: list
    budget_spent: bool = False


def validate_tally(tally: StepTally) -> None:
    """Raise TrajectoryError naming the first field of `tally` that is not of the `StepTally` form."""
    if not isinstance(tally, dict):
        raise TrajectoryError(f"tally: expected a dict with env_steps, episode_returns, episode_lengths, got "
                              f"{type(tally).__name__}")
    steps = tally.get("env_steps")
    if isinstance(steps, bool) or not isinstance(steps, int | np.integer) or not 0 <= steps <= MAX_TALLY_STEPS:
        raise TrajectoryError(f"tally field 'env_steps': expected an int in [0, {MAX_TALLY_STEPS}], got {steps!r}")
    returns, lengths = tally.get("episode_returns"), tally.get("episode_lengths")
    if not isinstance(returns, np.ndarray) or returns.ndim != 1 or returns.dtype.kind != "f":
        raise TrajectoryError(f"tally field 'episode_returns': expected a 1-d float array, got {_describe(returns)}")
    if not np.isfinite(returns).all():
        raise TrajectoryError("tally field 'episode_returns': expected finite values, got NaN or inf")
    if not isinstance(lengths, np.ndarray) or lengths.shape != returns.shape or lengths.dtype.kind not in "iu":
        raise TrajectoryError(f"tally field 'episode_lengths': expected an int array of shape {returns.shape}, got "
                              f"{_describe(lengths)}")
    if lengths.size and (lengths.min() < 1 or int(lengths.sum()) > MAX_TALLY_STEPS):
        raise TrajectoryError("tally field 'episode_lengths': expected lengths >= 1")


def _check_core(unroll: Unroll, spec: EnvSpec, K: int, core_size: int) -> None:
    """`core_state [2, K, N]` and `core_inputs [K, E]`, finite float32, for a recurrent policy (N = `core_size`);
    neither for a feed-forward one."""
    if not core_size:
        for key in CORE_KEYS:
            _expect(key not in unroll, key, "absent (a feed-forward policy: learner.lstm_size 0)",
                    lambda key=key: _describe(unroll[key]))
        return
    for key, shape in (("core_state", (2, K, core_size)), ("core_inputs", (K, spec.core_input_size))):
        _expect(key in unroll, key, f"present (a recurrent policy: learner.lstm_size {core_size})", "missing")
        a = unroll[key]
        _expect(isinstance(a, np.ndarray) and a.shape == shape and a.dtype == np.float32, key,
                f"float32 array of shape {shape}", lambda a=a: _describe(a))
        _expect(bool(np.isfinite(a).all()), key, "finite values", "NaN or inf")


def stack_unrolls(unrolls: Sequence[Unroll], concatenate: Callable[..., Any] = np.concatenate) -> Unroll:
    """Concatenate unrolls along the env axis into one batch `[T(+1), B, ...]`.

    `final_obs_index` columns are shifted by each unroll's offset; per-unroll scalars become `[n]`
    arrays (`policy_version`, `actor_id`) and per-env columns stay per column (`env_ids [B]`, `core_state
    [2, B, N]`, `core_inputs [B, E]`: every unroll has them, or none). `concatenate(arrays, axis=)` joins the
    step and core fields: the learner's also joins the tensors an in-process actor kept on its device.
    """
    if not unrolls:
        raise ValueError("stack_unrolls needs at least one unroll")
    batch = {key: concatenate([u[key] for u in unrolls], axis=1) for key in ("obs", *STEP_KEYS)}
    batch["env_ids"] = np.concatenate([u["env_ids"] for u in unrolls])
    for key, axis in (("core_state", 1), ("core_inputs", 0)):  # each along its env axis
        have = sum(key in u for u in unrolls)
        if have not in (0, len(unrolls)):
            raise ValueError(f"stack_unrolls: {have} of {len(unrolls)} unrolls have {key!r}: a batch is of one "
                             f"policy, recurrent (all) or feed-forward (none)")
        if have:
            batch[key] = concatenate([u[key] for u in unrolls], axis=axis)
    widths = [u["obs"].shape[1] for u in unrolls]
    offsets = np.cumsum([0, *widths[:-1]])
    finals = [u["final_obs"] for u in unrolls if u.get("final_obs") is not None and len(u["final_obs"])]
    if finals:
        batch["final_obs"] = np.concatenate(finals)
        batch["final_obs_index"] = np.concatenate(
            [
                u["final_obs_index"] + np.array([0, off])
                for u, off in zip(unrolls, offsets, strict=True)
                if u.get("final_obs") is not None and len(u["final_obs"])
            ]
        )
    batch["policy_version"] = np.repeat([int(u["policy_version"]) for u in unrolls], widths)
    batch["actor_id"] = np.repeat([int(u["actor_id"]) for u in unrolls], widths)
    return batch

"""Level windows on the actor side: which kind of window an actor is in, when it ends, and its envs' levels.

With a level buffer (`--num-levels 0`) and `levels.window` > 0, an actor plays windows of `window_unrolls(cfg)`
unrolls, each all replay or all explore, as DCD's rollouts are (the service decides, `level_service.windows`):

- in a replay window every env plays replayed levels back to back: an env whose episode ends takes the next of the
  window's replayed levels (where they run out it replays the level it just played, counted in `replay_repeats`);
- in an explore window each env plays its one new level (or ACCEL child), restarting it at every episode end.

A window starts at the last step of the previous one: just before that step the next window's levels are put in
place (`open_next`), so an env whose episode ends in it starts its new window level as an auto-reset does; after it
every env still playing is restarted on its new level (`EnvVector.restart`), its abandoned episode's last step
marked truncated with its true final observation in `final_obs`. That episode is cut, not finished: it is neither
scored nor counted. So every step of a replay window's unrolls is `level_replayed`, and none of an explore window's.

Under Robust PLR (`levels.robust`) an explore window's unrolls never leave the actor (`withheld`): they are scored
(`actors.episode_scorer`) and counted, their env steps and finished episodes going to the learner as a `StepTally`
(`ExploreTally`) with the next submit. An actor that starts (or restarts after a failure) starts a fresh window; one
killed mid-window loses that window's results only.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

import numpy as np

from levelray.actors.env_vector import EnvVector, LevelDraws, StepResult
from levelray.contracts.config import RunConfig, uses_level_service
from levelray.contracts.trajectory import StepTally, Unroll

__all__ = ["ExploreTally", "LevelWindows", "RemoteWindows", "ServiceWindows", "WindowFeed", "WindowLevels",
           "window_unrolls"]


def window_unrolls(cfg: RunConfig) -> int:
    """Unrolls per level window (`levels.window` rounded up to whole unrolls); 0: replay decided per episode."""
    if cfg.levels.window == 0 or cfg.env.num_levels > 0 or not uses_level_service(cfg):
        return 0
    return -(-cfg.levels.window // cfg.actors.unroll_length)


class WindowFeed(Protocol):
    """Where an actor's windows come from: `next_window(extra)` is the next window (`level_service.windows.Window`),
    or None when the service could not give one in time (the window then explores uniform levels)."""

    def next_window(self, extra: int):
        ...


class ServiceWindows:
    """Windows from a level service core in this process (the inline backend): asked for when needed."""

    def __init__(self, service, num_envs: int):
        self.service, self.num_envs = service, num_envs

    def next_window(self, extra: int):
        return self.service.draw_window(self.num_envs, extra)


class RemoteWindows:
    """Windows from the level service's Ray actor, one requested ahead: at each window start the window requested
    at the previous one is taken, and the next requested, so a window start waits on the service only when it did
    not answer within a whole window (at most `timeout_s`; then None: a window of uniform levels, counted in
    `uniform_fallbacks`). Refused or lost calls are counted in `service_errors`."""

    def __init__(self, service, num_envs: int, timeout_s: float = 10.0):
        import ray

        self._ray, self.service, self.num_envs, self.timeout_s = ray, service, num_envs, timeout_s
        self.pending = None
        self.requests = 0
        self.uniform_fallbacks = 0
        self.service_errors = 0
        self.last_error: str | None = None

    def next_window(self, extra: int):
        if self.pending is None:
            self._request(extra)
        window = None
        try:
            ready, _ = self._ray.wait([self.pending], timeout=self.timeout_s)
            if ready:
                window = self._ray.get(self.pending)
        except self._ray.exceptions.RayError as exc:  # refused, or the service is restarting
            self.service_errors += 1
            self.last_error = type(exc).__name__
        if window is None:
            self.uniform_fallbacks += 1
        self.pending = None
        self._request(extra)
        return window

    def _request(self, extra: int) -> None:
        self.pending = self.service.draw_window.remote(self.num_envs, extra)
        self.requests += 1


class WindowLevels(LevelDraws):
    """The envs' level source within windows (see the module doc): `install(window)` puts a window's levels in
    place; `env(k)` then gives env k its window level first, then, at each episode end, the next replayed level
    (replay window) or its window level again (explore window). A window of None explores uniform draws."""

    def __init__(self, num_envs: int):
        super().__init__(num_envs)
        self.replay = False
        self.start: list[int | None] = [None] * num_envs
        self.fresh = np.ones(num_envs, dtype=bool)  # [K] env k has not started its window level yet
        self.stock: deque[int] = deque()
        self.stock_used = 0  # replayed levels taken from `stock` in the current window
        self.replay_repeats = 0

    def install(self, window) -> None:
        if window is None:
            self.replay, self.start, levels = False, [None] * self.playing.size, []
        else:
            levels = [int(level) for level in window.levels]
            self.replay, self.start = bool(window.replay), levels[: self.playing.size]
            self.remember(dict(window.encodings), levels)
        self.stock = deque(levels[self.playing.size:]) if self.replay else deque()
        self.stock_used = 0
        self.fresh[:] = True

    def __call__(self, env_index: int) -> int | None:
        level = self.start[env_index]
        if self.fresh[env_index]:
            self.fresh[env_index] = False
        elif self.replay:
            if self.stock:
                level = self.stock.popleft()
                self.stock_used += 1
            else:
                level = int(self.playing[env_index])
                self.replay_repeats += 1
        self.replayed[env_index] = self.replay
        self.playing[env_index] = -1 if level is None else level
        return level


class LevelWindows:
    """One actor's windows of `unrolls` unrolls each, from `feed`, over `num_envs` envs; `withhold`: an explore
    window's unrolls stay on the actor (Robust PLR). `levels` is the envs' level source (`WindowLevels`)."""

    def __init__(self, feed: WindowFeed, num_envs: int, unrolls: int, *, withhold: bool):
        if unrolls < 1:
            raise ValueError(f"a level window is at least 1 unroll, got {unrolls}")
        self.feed, self.unrolls, self.withhold = feed, int(unrolls), bool(withhold)
        self.levels = WindowLevels(num_envs)
        self.unrolls_left = 0
        self.windows = 0
        self.extra = num_envs  # replayed levels asked for beyond the envs': twice what the last replay window used

    def begin(self) -> None:
        """The first window, before the envs' first reset."""
        self._install()

    def _install(self) -> None:
        self.levels.install(self.feed.next_window(self.extra))
        self.unrolls_left = self.unrolls
        self.windows += 1

    @property
    def replay(self) -> bool:
        """The current window replays (its steps are all `level_replayed`)."""
        return self.levels.replay

    @property
    def closing(self) -> bool:
        """The next unroll is the current window's last."""
        return self.unrolls_left == 1

    def open_next(self) -> None:
        """Before the window's last step: the next window's levels take over (see the module doc)."""
        if self.levels.replay:
            self.extra = max(self.levels.playing.size, 2 * self.levels.stock_used)
        self._install()
        self.unrolls_left += 1  # the unroll that ends the window is still to be counted (`unroll_done`)

    def close(self, envs: EnvVector, step: StepResult) -> np.ndarray:
        """After the window's last step: restart every env whose episode did not end in it, marking that step
        truncated with its true final observation (as an auto-reset does). Returns `cut [K] bool`, the envs whose
        episode was cut (never scored nor counted)."""
        cut = ~(step.terminated | step.truncated)
        running = np.flatnonzero(cut)
        if running.size:
            first = envs.restart(running)
            for i, k in enumerate(running.tolist()):
                step.final_obs[k] = step.obs[k].copy()
                step.obs[k] = first[i]
            step.truncated = step.truncated | cut
        return cut

    def unroll_done(self) -> None:
        self.unrolls_left -= 1


class ExploreTally:
    """The env steps and finished episodes of withheld unrolls, for the learner's counters (`StepTally`)."""

    def __init__(self) -> None:
        self.env_steps = 0
        self.returns: list[float] = []
        self.lengths: list[int] = []

    def add(self, unroll: Unroll) -> None:
        self.env_steps += int(unroll["rewards"].size)
        self.returns.extend(np.asarray(unroll["episode_returns"], dtype=np.float64).tolist())
        self.lengths.extend(np.asarray(unroll["episode_lengths"], dtype=np.int64).tolist())

    def take(self) -> StepTally | None:
        """What was added since the last call; None when nothing was."""
        if self.env_steps == 0:
            return None
        tally = StepTally(env_steps=self.env_steps, episode_returns=np.array(self.returns, dtype=np.float64),
                          episode_lengths=np.array(self.lengths, dtype=np.int64))
        self.env_steps, self.returns, self.lengths = 0, [], []
        return tally

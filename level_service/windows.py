"""Level windows on the service side: deciding whether an actor's next window replays, and drawing its levels.

DCD decides replay or explore once per rollout of all its envs (`num_steps` = 256 steps), not per episode: with a
level buffer (`--num-levels 0`) and `levels.window` > 0, an actor asks for a whole window at once
(`LevelServiceCore.draw_window`), and this module answers:

- with ACCEL's editor, a window while children wait in the editor's queue explores them: each replay window makes
  one child per env, of the levels it starts with, so a child window follows each replay window and the trained
  share of env steps is `p / (1 + p)` (DCD's ACCEL, where an edit step follows each replay step);
- otherwise the window replays with the buffer's `replay_probability()` `p` (0 until `rho` of the buffer is filled),
  else explores new levels: the trained share is `p` under Robust PLR, whatever the levels' lengths.

A replay window's levels are replayed ones (`draw_many(n, "replay")`): one to start each env, and `extra` more for
the episodes that end within the window (each env plays replayed levels back to back). An explore window's are new
levels, the queued children first (`draw_many(n, "new")`): one per env, which it replays at every episode end until
the window closes. The decision's random numbers are this module's own generator, saved with the service's
snapshot, so a restored service decides as the one that wrote it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from levelray.contracts.rng import make_rng, rng_from_state
from levelray.level_service.buffer import LevelBuffer

__all__ = ["MAX_WINDOW_LEVELS", "Window", "WindowDecider"]

MAX_WINDOW_LEVELS = 1 << 16  # envs plus extra levels one window may ask for


class Window(NamedTuple):
    """One window's levels: `replay` (all its levels replayed, else all new), `levels [num_envs + extra]` (the
    first `num_envs` start the envs, in env order; the rest are for episodes that end within a replay window), and
    the encodings of the edited levels among them."""

    replay: bool
    levels: list[int]
    encodings: dict[int, bytes]


def _count(name: str, value: Any, low: int) -> int:
    """`value` as an int in `[low, MAX_WINDOW_LEVELS]`; ValueError naming `name` for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not low <= value <= MAX_WINDOW_LEVELS:
        raise ValueError(f"{name} must be an int in [{low}, {MAX_WINDOW_LEVELS}], got {value!r}")
    return int(value)


class WindowDecider:
    """Decides and draws level windows over a `LevelBuffer` (see the module doc); `rng` seeds the decisions."""

    def __init__(self, rng=None):
        self.rng = make_rng(rng)
        self.counts = {"num_windows": 0, "num_replay_windows": 0}

    def draw(self, buffer: LevelBuffer, num_envs: int, extra: int, encodings_of) -> Window:
        """The next window of an actor with `num_envs` envs, with `extra` more replayed levels for a replay window;
        `encodings_of(ids)` gives the encodings of edited levels. Both counts are checked first (ValueError naming
        the field); nothing changes on a bad call."""
        num_envs = _count("num_envs", num_envs, 1)
        extra = _count("extra", extra, 0)
        editor = buffer.editor
        children_wait = editor is not None and len(editor.queue) > 0
        p = buffer.replay_probability()
        replay = not children_wait and p > 0.0 and self.rng.random() < p
        if replay:
            ids, _ = buffer.draw_many(num_envs + extra, "replay")
            if editor is not None:
                for parent in ids[:num_envs].tolist():
                    editor.make_child(parent, self.rng)
        else:
            ids, _ = buffer.draw_many(num_envs, "new")
        self.counts["num_windows"] += 1
        self.counts["num_replay_windows"] += int(replay)
        levels = ids.tolist()
        return Window(bool(replay), levels, encodings_of(levels))

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.bit_generator.state, "counts": dict(self.counts)}

    @classmethod
    def from_state_dict(cls, state: Any) -> WindowDecider:
        """The decider `state_dict()` wrote; ValueError naming the bad field."""
        if not isinstance(state, dict):
            raise ValueError(f"windows must be a dict with 'rng' and 'counts', got {type(state).__name__}")
        decider = cls(rng_from_state(state.get("rng"), "windows.rng"))
        counts = state.get("counts")
        try:
            decider.counts = {key: int(counts[key]) for key in decider.counts}
        except (KeyError, TypeError, ValueError):
            raise ValueError("windows.counts must hold num_windows and num_replay_windows as ints") from None
        return decider

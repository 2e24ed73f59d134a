"""The maze family's step and view as compiled loops over the K envs of a vector (numba, `cache=True`).

What the loops compute is MiniGrid's (`minigrid==3.0.0`, `MiniGridEnv.step` and `gen_obs`) for a grid of walls,
floor and one goal, so that `families.maze.env.MazeVector` steps exactly as the MiniGrid-built env
`families.maze.grid.MazeGridEnv` does (a test steps both side by side):

- actions: 0 turns left, 1 turns right, 2 moves forward unless a wall is in front (onto the goal: the episode
  terminates with reward `1 - 0.9 * steps / max_steps`); 3-6 (pickup, drop, toggle, done) change nothing in a
  maze; every action counts a step, and `steps >= max_steps` truncates (not when the step also terminated).
- the view: the 7x7 cells ahead of the agent, the agent at the middle of the bottom row facing up (MiniGrid's
  slice and left rotations), cells outside the grid seen as walls, and MiniGrid's occlusion (`Grid.process_vis`:
  visibility spreads row by row away from the agent, sideways and forward, and stops at walls; tabulated per
  row, `ROW_VISIBILITY`: a fifth of a step's time less than running its loops); each cell is
  MiniGrid's `(object, colour, state)` triple, unseen cells `(0, 0, 0)`, the agent's own cell empty, and
  channel 3 is the agent's direction.
- DCD's view (`env.maze_view dcd`: `observe_through`, `step_through`): the 5x5 cells ahead, laid out the same way,
  every one seen (DCD's maze envs pass `see_through_walls=True` to their MultiGrid base, whose `gen_obs_grid` then
  skips `process_vis`), encoded the same way (DCD's separate direction input is channel 3 here, as for MiniGrid's).

The state is plain arrays, one row per env: `cells [K, H + 2 + 2 * PAD, W + 2 + 2 * PAD] uint8` (MiniGrid's
object index of every grid cell: the level's inner cells, MiniGrid's outer wall, and `PAD` more cells of wall
on every side, so a view never reads past the array) and `state [K, 4] int64`: the agent's `x` and `y` in that
padded array, its direction (0 right, 1 down, 2 left, 3 up) and the steps taken this episode.

Compiled on first use; `cache=True` keeps the machine code beside this module (or in numba's per-user cache
where that folder cannot be written), so later processes load it instead: the first maze vector of a process
costs ~4.6 s where it compiles and ~0.7 s where it loads the cache, numba's own import (~0.5 s) included
(measured on the 2-core machine under load ~10). A step of 64 envs takes ~6.6 us of CPU in these loops (~4 us with
DCD's view: no occlusion, 25 cells).
"""

from __future__ import annotations

import numpy as np
from numba import njit

VIEW = 7  # MiniGrid's agent_view_size
DCD_VIEW = 5  # DCD's (`envs/multigrid/maze.py`, `agent_view_size=5`), seen through walls
PAD = VIEW - 1  # wall cells around the grid: the farthest a view reaches past the agent's cell
EMPTY, WALL, GOAL = 1, 2, 8  # MiniGrid's OBJECT_TO_IDX
X, Y, DIR, STEPS = range(4)  # the columns of `state`
COLOUR = np.zeros(16, dtype=np.uint8)
COLOUR[WALL], COLOUR[GOAL] = 5, 1  # MiniGrid's COLOR_TO_IDX: walls grey, the goal green
DIR_VEC = np.array([[1, 0], [0, 1], [-1, 0], [0, -1]], dtype=np.int64)  # MiniGrid's DIR_TO_VEC


def _view_offsets(size: int) -> np.ndarray:
    """`[4, size, size, 2]`: the `(dx, dy)` from the agent of view cell `(i, j)` facing each direction: `size - 1 - j`
    cells ahead and `i - size // 2` to the agent's right (MiniGrid's `right_vec` is `(-dy, dx)` of the facing
    one)."""
    out = np.zeros((4, size, size, 2), dtype=np.int64)
    for d, (dx, dy) in enumerate(DIR_VEC.tolist()):
        for i in range(size):
            for j in range(size):
                ahead, right = size - 1 - j, i - size // 2
                out[d, i, j] = (ahead * dx - right * dy, ahead * dy + right * dx)
    return out


def _cell_codes() -> np.ndarray:
    """`[4, 16] uint32`: the 4 observation bytes of a seen cell of each object index for each direction, read as
    one uint32 (in this machine's byte order), so a view cell is written at once."""
    out = np.zeros((4, 16, 4), dtype=np.uint8)
    for d in range(4):
        for kind in range(16):
            out[d, kind] = (kind, COLOUR[kind], 0, d)
    return out.view(np.uint32)[..., 0]


def _row_visibility() -> np.ndarray:
    """`[128, 128] uint16`: MiniGrid's `Grid.process_vis` on one row of the view, tabulated. Row `j`'s visibility
    depends only on the cells of row `j + 1` that made it visible (`seen`, 7 bits) and which of its cells are
    not walls (`open`, 7 bits): entry `[seen, open]` holds the row's visible cells in bits 0-6 and the cells of
    row `j - 1` it makes visible in bits 8-14, computed by process_vis's two passes, loop for loop."""
    out = np.zeros((128, 128), dtype=np.uint16)
    for seen_bits in range(128):
        for open_bits in range(128):
            seen = [(seen_bits >> i) & 1 for i in range(VIEW)]
            see_through = [(open_bits >> i) & 1 for i in range(VIEW)]
            above = [0] * VIEW
            for i in range(VIEW - 1):  # left to right
                if seen[i] and see_through[i]:
                    seen[i + 1] = above[i + 1] = above[i] = 1
            for i in range(VIEW - 1, 0, -1):  # right to left
                if seen[i] and see_through[i]:
                    seen[i - 1] = above[i - 1] = above[i] = 1
            out[seen_bits, open_bits] = sum(b << i for i, b in enumerate(seen)) | sum(
                b << (8 + i) for i, b in enumerate(above))
    return out


VIEW_OFFSETS = _view_offsets(VIEW)  # module constants: numba compiles them into the loops
DCD_OFFSETS = _view_offsets(DCD_VIEW)
CELL_CODES = _cell_codes()
ROW_VISIBILITY = _row_visibility()


@njit(cache=True, nogil=True)
def _observe(cells, x, y, d, out, kind):
    """The view of an agent at `(x, y)` facing `d` in `cells` into `out [VIEW, VIEW] uint32` (each cell's 4 bytes,
    see `CELL_CODES`), row by row away from the agent (`ROW_VISIBILITY`); `kind [VIEW]`: scratch."""
    incoming = np.int64(1 << (VIEW // 2))  # the agent's own cell is always seen
    for j in range(VIEW - 1, -1, -1):
        see_through = 0
        for i in range(VIEW):
            kind[i] = cells[y + VIEW_OFFSETS[d, i, j, 1], x + VIEW_OFFSETS[d, i, j, 0]]
            if kind[i] != WALL:
                see_through |= 1 << i
        row = np.int64(ROW_VISIBILITY[incoming, see_through])
        incoming = row >> 8
        if j == VIEW - 1:
            kind[VIEW // 2] = EMPTY  # the agent's own cell (gen_obs_grid sets it to None: nothing carried)
        for i in range(VIEW):
            out[i, j] = CELL_CODES[d, kind[i] if (row >> i) & 1 else 0]  # unseen: object 0, colour 0


@njit(cache=True, nogil=True)
def _observe_through(cells, x, y, d, out):
    """DCD's view of an agent at `(x, y)` facing `d` into `out [DCD_VIEW, DCD_VIEW] uint32`: every cell seen, the
    agent's own cell empty."""
    for j in range(DCD_VIEW):
        for i in range(DCD_VIEW):
            out[i, j] = CELL_CODES[d, cells[y + DCD_OFFSETS[d, i, j, 1], x + DCD_OFFSETS[d, i, j, 0]]]
    out[DCD_VIEW // 2, DCD_VIEW - 1] = CELL_CODES[d, EMPTY]


@njit(cache=True, nogil=True)
def _cells_as_words(obs):
    """`obs [K, VIEW, VIEW, 4] uint8` (C-contiguous) as `[K, VIEW, VIEW] uint32`, the same memory."""
    return obs.reshape(obs.shape[0], VIEW * VIEW * 4).view(np.uint32).reshape(obs.shape[0], VIEW, VIEW)


@njit(cache=True, nogil=True)
def _dcd_cells_as_words(obs):
    """`obs [K, DCD_VIEW, DCD_VIEW, 4] uint8` as `[K, DCD_VIEW, DCD_VIEW] uint32`, the same memory."""
    return obs.reshape(obs.shape[0], DCD_VIEW * DCD_VIEW * 4).view(np.uint32).reshape(obs.shape[0], DCD_VIEW,
                                                                                     DCD_VIEW)


@njit(cache=True, nogil=True)
def observe(cells, state, envs, obs):
    """The views of envs `envs [n]` into `obs [K, VIEW, VIEW, 4]`."""
    kind = np.empty(VIEW, dtype=np.uint8)
    words = _cells_as_words(obs)
    for k in envs:
        _observe(cells[k], state[k, X], state[k, Y], state[k, DIR], words[k], kind)


@njit(cache=True, nogil=True)
def observe_through(cells, state, envs, obs):
    """DCD's views of envs `envs [n]` into `obs [K, DCD_VIEW, DCD_VIEW, 4]`."""
    words = _dcd_cells_as_words(obs)
    for k in envs:
        _observe_through(cells[k], state[k, X], state[k, Y], state[k, DIR], words[k])


@njit(cache=True, nogil=True, inline="always")
def _bad_action(actions):
    """`-1 - k` for the first env k whose action is not in 0..6, else 0."""
    for k in range(actions.shape[0]):
        if actions[k] < 0 or actions[k] > 6:
            return -1 - k
    return 0


@njit(cache=True, nogil=True, inline="always")
def _move(a, cells, k, x, y, d, steps, max_steps):
    """Env k's agent at `(x, y)` facing `d` takes action `a` at step `steps` of its episode (see the module doc):
    its new `(x, y, d, reward, reached the goal)`."""
    reward = 0.0
    done = False
    if a == 0:
        d = (d + 3) % 4
    elif a == 1:
        d = (d + 1) % 4
    elif a == 2:
        fx, fy = x + DIR_VEC[d, 0], y + DIR_VEC[d, 1]
        ahead = cells[k, fy, fx]
        if ahead != WALL:
            x, y = fx, fy
        if ahead == GOAL:
            done = True
            reward = 1 - 0.9 * (steps / max_steps)
    return x, y, d, reward, done


# `step` and `step_through` differ only in the view they write: one loop each, as a choice of view per env (or one
# loop of both) made MiniGrid's steps 25-40% slower than this; the move is `_move` in `step_through`, and written
# out in `step` (see there).
@njit(cache=True, nogil=True)
def step(actions, cells, state, max_steps, obs, rewards, terminated, truncated):
    """One step of every env (see the module doc): updates `state` in place and writes `obs [K, VIEW, VIEW, 4]`
    (the view after the step), `rewards`, `terminated` and `truncated` `[K]`. Returns how many envs ended, or
    `-1 - k` where env k's action is not in 0..6 (then no env is stepped)."""
    bad = _bad_action(actions)
    if bad:
        return bad
    kind = np.empty(VIEW, dtype=np.uint8)
    words = _cells_as_words(obs)
    ended = 0
    for k in range(actions.shape[0]):
        # `_move`, written out: called here (even inlined by numba) it cost MiniGrid's view 7% of the env's steps/s
        a, x, y, d = actions[k], state[k, X], state[k, Y], state[k, DIR]
        steps = state[k, STEPS] + 1
        reward = 0.0
        done = False
        if a == 0:
            d = (d + 3) % 4
        elif a == 1:
            d = (d + 1) % 4
        elif a == 2:
            fx, fy = x + DIR_VEC[d, 0], y + DIR_VEC[d, 1]
            ahead = cells[k, fy, fx]
            if ahead != WALL:
                x, y = fx, fy
            if ahead == GOAL:
                done = True
                reward = 1 - 0.9 * (steps / max_steps)
        state[k, X], state[k, Y], state[k, DIR], state[k, STEPS] = x, y, d, steps
        rewards[k] = reward
        terminated[k] = done
        truncated[k] = steps >= max_steps and not done
        if done or truncated[k]:
            ended += 1
        _observe(cells[k], x, y, d, words[k], kind)
    return ended


@njit(cache=True, nogil=True)
def step_through(actions, cells, state, max_steps, obs, rewards, terminated, truncated):
    """`step` with DCD's view: `obs [K, DCD_VIEW, DCD_VIEW, 4]`."""
    bad = _bad_action(actions)
    if bad:
        return bad
    words = _dcd_cells_as_words(obs)
    ended = 0
    for k in range(actions.shape[0]):
        steps = state[k, STEPS] + 1
        x, y, d, reward, done = _move(actions[k], cells, k, state[k, X], state[k, Y], state[k, DIR], steps, max_steps)
        state[k, X], state[k, Y], state[k, DIR], state[k, STEPS] = x, y, d, steps
        rewards[k] = reward
        terminated[k] = done
        truncated[k] = steps >= max_steps and not done
        if done or truncated[k]:
            ended += 1
        _observe_through(cells[k], x, y, d, words[k])
    return ended

"""ACCEL's level editor for the maze family: children of replayed levels, held as encodings by the level service.

Parker-Holder et al., "Evolving Curricula with Regret-Based Environment Design" (ICML 2022), as
`facebookresearch/dcd` runs it on MiniGrid mazes: after a replayed level's episode is scored, the editor makes a
child with `num_edits` small random edits; the child is played as a new level (with Robust PLR, to be scored
only) and enters the level buffer by the buffer's rule. Starting from empty rooms (`--maze-blocks 0`), the
buffer's levels grow more complex only as far as the agent's regret rewards it.

An edit (`edit_maze`) is DCD's: `num_edits` distinct cells, drawn uniformly from every cell but the agent's start,
each become wall, floor or goal with probability 1/3 each, in the order drawn. A cell made goal moves the goal
there (its old cell becomes floor); the goal's own cell made wall or floor removes the goal, and a child left
without one gets it on a floor cell drawn uniformly (never the agent's). So the goal moves in most children
(1 - (1 - 1/3)^num_edits of them at least, 0.87 at 5 edits) and a child adds num_edits / 3 walls on average. The
agent's cell is never edited, so never walled. A child whose goal cannot be reached from the agent's start (BFS)
is counted (`num_unsolvable`) and kept, as DCD and JaxUED keep them; `drop_unsolvable` (the run's
`levels.drop_unsolvable`) drops it instead.

Edited levels exist only as encodings (`MazeLevel.encode`, 30 bytes at 13x13) under ids from
`contracts.maze.EDITED_ID_BASE` upwards, the k-th child kept getting `EDITED_ID_BASE + k`: a range no seed or
suite maze can reach. `MazeEditor` holds the encoding of every edited level that may still be played or scored: the
buffered ones, the queued children, and the most recent `RECENT_LIMIT` that left both (handed out and not yet
scored, or evicted while an env still played them; their late episodes are scored as any other). Pure NumPy:
the level buffer (`level_service.buffer`) owns one and tells it which levels it holds.
"""

from __future__ import annotations

import functools
from collections import OrderedDict, deque
from typing import Any

import numpy as np

from levelray.contracts.config import EnvConfig, LevelConfig
from levelray.contracts.maze import (
    EDITED_ID_BASE,
    MazeLevel,
    level_for_id,
    maze_size,
    parse_blocks,
    shortest_path_length,
)
from levelray.level_service.editors import LEVEL_EDITORS

__all__ = ["EDIT_KINDS", "MazeEditor", "edit_maze"]

EDIT_KINDS = ("wall", "floor", "goal")  # what an edited cell becomes, each with probability 1/3 (DCD's editor actions)
RECENT_LIMIT = 1 << 16  # edited levels kept after leaving the buffer and the queue (~10 MB of encodings at most)
EDITOR_COUNT_KEYS = ("num_children", "num_unsolvable", "num_queue_dropped", "num_handed_out")


@functools.lru_cache(maxsize=4096)
def _generated(level_id: int, width: int, height: int, blocks: tuple[int, int]) -> MazeLevel:
    """`level_for_id`, kept for the levels replayed most: a buffered seed is edited each time it is replayed, and
    generating it anew (a NumPy Generator per seed) cost as much as the edit itself."""
    return level_for_id(level_id, width, height, blocks)


def edit_maze(level: MazeLevel, num_edits: int, rng: np.random.Generator) -> MazeLevel:
    """A child of `level` with `num_edits` edits (see the module doc); the agent's start never changes.

    Draws, in this order: a permutation of the cells (the first `num_edits` but the agent's are edited), one kind
    per edited cell (an index into `EDIT_KINDS`), and, only where the goal was removed, its new cell."""
    width, height = level.width, level.height
    agent = level.agent[1] * width + level.agent[0]  # flat [y, x] indices
    goal: int | None = level.goal[1] * width + level.goal[0]
    order = rng.permutation(width * height)
    cells = order[order != agent][:num_edits]
    kinds = rng.integers(len(EDIT_KINDS), size=cells.size)
    walls = level.walls.reshape(-1).copy()
    for cell, kind in zip(cells.tolist(), kinds.tolist(), strict=True):
        walls[cell] = kind == 0
        if kind == 2:
            goal = cell
        elif cell == goal:
            goal = None
    if goal is None:
        free = np.flatnonzero(~walls)
        free = free[free != agent]
        if free.size:
            goal = int(free[rng.integers(free.size)])
        else:  # every other cell a wall: the goal stays where it was, on floor
            goal = level.goal[1] * width + level.goal[0]
            walls[goal] = False
    return MazeLevel(width, height, walls.reshape(height, width), level.agent, level.agent_dir,
                     (goal % width, goal // width))


@LEVEL_EDITORS.register("accel")
class MazeEditor:
    """The children of one maze run and the encodings of its edited levels (see the module doc).

    `blocks` is the family's `--maze-blocks` range, with which a seed becomes a level; `queue_limit` the most
    children waiting to be played (beyond it the oldest is dropped, counted in `num_queue_dropped`);
    `drop_unsolvable` drops the children whose goal is unreachable instead of queueing them."""

    edits_env = "maze:"  # the env ids of the family it edits (`level_service.editors.editor_problems`)
    edits_family = "a maze family (--env maze:<W>x<H>)"

    def __init__(self, width: int, height: int, blocks: tuple[int, int], num_edits: int, queue_limit: int,
                 drop_unsolvable: bool = False):
        if isinstance(num_edits, bool) or not isinstance(num_edits, int | np.integer) or num_edits < 1:
            raise ValueError(f"levels.num_edits must be a positive int, got {num_edits!r}")
        self.width, self.height, self.blocks = width, height, blocks
        self.family = f"{width}x{height} mazes with {blocks} walls"  # a saved state resumes only with the same family
        self.num_edits = int(num_edits)
        self.queue_limit = max(1, int(queue_limit))
        self.drop_unsolvable = bool(drop_unsolvable)
        self.encodings: dict[int, bytes] = {}  # every edited level held, by id
        self.queue: deque[int] = deque()  # children waiting to be handed out, oldest first
        self.recent: OrderedDict[int, None] = OrderedDict()  # held ids neither buffered nor queued, oldest first
        self.next_index = 0  # the next child's id is EDITED_ID_BASE + next_index
        self.counts = dict.fromkeys(EDITOR_COUNT_KEYS, 0)

    @classmethod
    def for_run(cls, env: EnvConfig, levels: LevelConfig) -> MazeEditor:
        """The editor of a maze run's `env` and `levels` sections (`maze:<W>x<H>`: what the editor needs of a run
        is checked by `level_service.editors.editor_problems` before this is called); at most
        `levels.buffer_size` children wait to be played."""
        width, height = maze_size(env.id)
        return cls(width, height, parse_blocks(env.maze_blocks), levels.num_edits, levels.buffer_size,
                   drop_unsolvable=levels.drop_unsolvable)

    # ------------------------------------------------------------------ reading
    def is_edited(self, level_id: int) -> bool:
        return level_id >= EDITED_ID_BASE

    def knows(self, ids: np.ndarray) -> np.ndarray:
        """`[n] bool`: which of the edited ids `ids [n]` this editor holds an encoding of."""
        return np.fromiter((i in self.encodings for i in ids.tolist()), dtype=bool, count=ids.size)

    def level(self, level_id: int) -> MazeLevel:
        """The level `level_id` names: a held edited level, else a seed or suite maze of the family."""
        data = self.encodings.get(int(level_id))
        if data is not None:
            return MazeLevel.decode(data)
        if self.is_edited(level_id):
            raise ValueError(f"unknown level id {level_id}: an edited level id this level service does not hold")
        return _generated(int(level_id), self.width, self.height, self.blocks)

    def counters(self) -> dict[str, int]:
        """`EDITOR_COUNT_KEYS`, the children waiting (`queued`) and the edited levels held (`held`)."""
        return {**self.counts, "queued": len(self.queue), "held": len(self.encodings)}

    def encodings_of(self, ids) -> dict[int, bytes]:
        """`{id: encoding}` for the edited levels among `ids` (what an actor needs to play them)."""
        return {i: self.encodings[i] for i in ids if i >= EDITED_ID_BASE and i in self.encodings}

    # ------------------------------------------------------------------ children
    def edit(self, level: MazeLevel, rng: np.random.Generator) -> MazeLevel:
        """A child of `level`: DCD's edit (`edit_maze`). An editor of other children overrides only this; the
        queue, the encodings held and the state stay the same."""
        return edit_maze(level, self.num_edits, rng)

    def make_child(self, parent_id: int, rng: np.random.Generator) -> int | None:
        """Edit level `parent_id` (`edit`) and queue the child; its id, or None where its goal is unreachable and
        `drop_unsolvable` drops it."""
        child = self.edit(self.level(parent_id), rng)
        self.counts["num_children"] += 1
        if shortest_path_length(child) is None:
            self.counts["num_unsolvable"] += 1
            if self.drop_unsolvable:
                return None
        child_id = EDITED_ID_BASE + self.next_index
        self.next_index += 1
        self.encodings[child_id] = child.encode()
        self.queue.append(child_id)
        if len(self.queue) > self.queue_limit:
            dropped = self.queue.popleft()
            del self.encodings[dropped]
            self.counts["num_queue_dropped"] += 1
        return child_id

    def take(self, n: int) -> list[int]:
        """Up to `n` queued children, oldest first, handed out to be played."""
        taken = [self.queue.popleft() for _ in range(min(n, len(self.queue)))]
        for child_id in taken:
            self._keep_recent(child_id)
        self.counts["num_handed_out"] += len(taken)
        return taken

    # ------------------------------------------------------------------ what the buffer holds
    def buffered(self, level_id: int) -> None:
        """Level `level_id` entered the buffer: its encoding is kept for as long as it stays."""
        self.recent.pop(level_id, None)

    def released(self, level_id: int) -> None:
        """Level `level_id` left the buffer or was not let in: kept a while for episodes still being played."""
        if level_id in self.encodings:
            self._keep_recent(level_id)

    def _keep_recent(self, level_id: int) -> None:
        self.recent[level_id] = None
        self.recent.move_to_end(level_id)
        while len(self.recent) > RECENT_LIMIT:
            old, _ = self.recent.popitem(last=False)
            del self.encodings[old]

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        ids = np.fromiter(self.encodings, dtype=np.int64, count=len(self.encodings))
        return {
            "family": [self.width, self.height, *self.blocks], "num_edits": self.num_edits,
            "queue_limit": self.queue_limit, "drop_unsolvable": self.drop_unsolvable, "ids": ids,
            "encodings": [self.encodings[i] for i in ids.tolist()],
            "queue": np.array(self.queue, dtype=np.int64), "recent": np.array(list(self.recent), dtype=np.int64),
            "next_index": self.next_index, "counts": dict(self.counts),
        }

    @classmethod
    def from_state_dict(cls, d: dict[str, Any]) -> MazeEditor:
        """An editor rebuilt from `state_dict()` output; ValueError naming the bad field. Which held ids the
        buffer holds is checked by the buffer (`check_held`)."""
        width, height, low, high = (int(v) for v in d["family"])
        editor = cls(width, height, (low, high), int(d["num_edits"]), int(d["queue_limit"]),
                     drop_unsolvable=bool(d["drop_unsolvable"]))
        ids = np.asarray(d["ids"], dtype=np.int64)
        encodings = list(d["encodings"])
        if ids.ndim != 1 or len(encodings) != ids.size or np.unique(ids).size != ids.size:
            raise ValueError("state['editor'] must hold distinct 'ids' and one encoding for each")
        editor.next_index = int(d["next_index"])
        if ids.size and (ids.min() < EDITED_ID_BASE or ids.max() >= EDITED_ID_BASE + editor.next_index):
            raise ValueError(f"state['editor']['ids'] must lie in [{EDITED_ID_BASE}, {EDITED_ID_BASE} + next_index)")
        for level_id, data in zip(ids.tolist(), encodings, strict=True):
            level = MazeLevel.decode(data)
            if (level.width, level.height) != (width, height):
                raise ValueError(f"state['editor'] level {level_id} is {level.width}x{level.height}, the editor's "
                                 f"maze family is {width}x{height}")
            editor.encodings[level_id] = bytes(data)
        editor.queue = deque(np.asarray(d["queue"], dtype=np.int64).tolist())
        editor.recent = OrderedDict.fromkeys(np.asarray(d["recent"], dtype=np.int64).tolist())
        editor.counts = {k: int(d["counts"][k]) for k in EDITOR_COUNT_KEYS}
        return editor

    def check_held(self, buffered: np.ndarray) -> None:
        """ValueError unless the encodings held are exactly those of the buffered edited levels (`buffered [n]`,
        the buffer's ids), the queued children and the recent ones (a saved state read back)."""
        held = set(self.queue) | set(self.recent) | {i for i in buffered.tolist() if i >= EDITED_ID_BASE}
        if held != set(self.encodings):
            raise ValueError("state['editor'] must hold exactly the encodings of the buffered, queued and recent "
                             "edited levels")

"""What every ACCEL editor does whatever it edits: children queued to be played, held as encodings while they may
still be played or scored, saved and read back with the level buffer. A family's editor (`families.maze.editor`, the
corridor of docs/guides/environments.md) subclasses `EditedLevels` and writes only its levels: how a level id becomes
a level, how a child is made, how a level is written as bytes and read back.

Edited levels exist only as encodings under ids from `contracts.levels.EDITED_ID_BASE` upwards, the k-th child kept
getting `EDITED_ID_BASE + k`: a range no seed reaches. The editor holds the encoding of every edited level that may
still be played or scored: the buffered ones, the queued children, and the most recent `RECENT_LIMIT` that left both
(handed out and not yet scored, or evicted while an env still played them; their late episodes are scored as any
other). Pure Python and NumPy: the level buffer (`level_service.buffer`) owns one and tells it which levels it holds.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Any

import numpy as np

from levelray.contracts.levels import EDITED_ID_BASE

__all__ = ["EDITOR_COUNT_KEYS", "EditedLevels", "RECENT_LIMIT"]

RECENT_LIMIT = 1 << 16  # edited levels kept after leaving the buffer and the queue (~10 MB of maze encodings at most)
EDITOR_COUNT_KEYS = ("num_children", "num_unsolvable", "num_queue_dropped", "num_handed_out")


class EditedLevels:
    """The children of one run and the encodings of its edited levels (see the module doc); a family's editor
    subclasses it and provides `generated`, `edit`, `encode`, `decode`, `family_state` and `for_family_state`
    (and `solvable`, where some children cannot be finished).

    `family` names the levels it edits in words ("13x13 mazes with (0, 60) walls"): a saved state resumes only
    with the same. `queue_limit` is the most children waiting to be played (beyond it the oldest is dropped,
    counted in `num_queue_dropped`); `drop_unsolvable` drops the children `solvable` refuses instead of queueing
    them."""

    edits_env = ""  # the prefix of the env ids of the family it edits (`level_service.editors.editor_problems`)
    edits_family = ""  # that family in the words of a refusal ("a maze family (--env maze:<W>x<H>)")

    def __init__(self, family: str, num_edits: int, queue_limit: int, drop_unsolvable: bool = False):
        if isinstance(num_edits, bool) or not isinstance(num_edits, int | np.integer) or num_edits < 1:
            raise ValueError(f"levels.num_edits must be a positive int, got {num_edits!r}")
        self.family = family
        self.num_edits = int(num_edits)
        self.queue_limit = max(1, int(queue_limit))
        self.drop_unsolvable = bool(drop_unsolvable)
        self.encodings: dict[int, bytes] = {}  # every edited level held, by id
        self.queue: deque[int] = deque()  # children waiting to be handed out, oldest first
        self.recent: OrderedDict[int, None] = OrderedDict()  # held ids neither buffered nor queued, oldest first
        self.next_index = 0  # the next child's id is EDITED_ID_BASE + next_index
        self.counts = dict.fromkeys(EDITOR_COUNT_KEYS, 0)

    # ------------------------------------------------------------------ the family's part
    def generated(self, level_id: int) -> Any:
        """The level a seed (or another id the family knows) names."""
        raise NotImplementedError

    def edit(self, level: Any, rng: np.random.Generator) -> Any:
        """A child of `level`, drawn from `rng`."""
        raise NotImplementedError

    def encode(self, level: Any) -> bytes:
        raise NotImplementedError

    def decode(self, data: bytes) -> Any:
        """The level `data` encodes; ValueError naming what is wrong (a saved state read back)."""
        raise NotImplementedError

    def solvable(self, level: Any) -> bool:
        """Whether a child can be finished at all (counted in `num_unsolvable` where not)."""
        return True

    def family_state(self) -> list[int]:
        """What `family` is made of, as ints (a maze's width, height and wall range), saved with the state."""
        raise NotImplementedError

    @classmethod
    def for_family_state(cls, values: list[int], num_edits: int, queue_limit: int,
                         drop_unsolvable: bool) -> EditedLevels:
        """An empty editor of the family `family_state()` gave."""
        raise NotImplementedError

    # ------------------------------------------------------------------ reading
    def knows(self, ids: np.ndarray) -> np.ndarray:
        """`[n] bool`: which of the edited ids `ids [n]` this editor holds an encoding of."""
        return np.fromiter((i in self.encodings for i in ids.tolist()), dtype=bool, count=ids.size)

    def level(self, level_id: int) -> Any:
        """The level `level_id` names: a held edited level, else a level of the family (`generated`)."""
        data = self.encodings.get(int(level_id))
        if data is not None:
            return self.decode(data)
        if level_id >= EDITED_ID_BASE:
            raise ValueError(f"unknown level id {level_id}: an edited level id this level service does not hold")
        return self.generated(int(level_id))

    def counters(self) -> dict[str, int]:
        """`EDITOR_COUNT_KEYS`, the children waiting (`queued`) and the edited levels held (`held`)."""
        return {**self.counts, "queued": len(self.queue), "held": len(self.encodings)}

    def encodings_of(self, ids) -> dict[int, bytes]:
        """`{id: encoding}` for the edited levels among `ids` (what an actor needs to play them)."""
        return {i: self.encodings[i] for i in ids if i >= EDITED_ID_BASE and i in self.encodings}

    # ------------------------------------------------------------------ children
    def make_child(self, parent_id: int, rng: np.random.Generator) -> int | None:
        """Edit level `parent_id` (`edit`) and queue the child; its id, or None where it cannot be finished
        (`solvable`) and `drop_unsolvable` drops it."""
        child = self.edit(self.level(parent_id), rng)
        self.counts["num_children"] += 1
        if not self.solvable(child):
            self.counts["num_unsolvable"] += 1
            if self.drop_unsolvable:
                return None
        child_id = EDITED_ID_BASE + self.next_index
        self.next_index += 1
        self.encodings[child_id] = self.encode(child)
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
            "family": self.family_state(), "num_edits": self.num_edits,
            "queue_limit": self.queue_limit, "drop_unsolvable": self.drop_unsolvable, "ids": ids,
            "encodings": [self.encodings[i] for i in ids.tolist()],
            "queue": np.array(self.queue, dtype=np.int64), "recent": np.array(list(self.recent), dtype=np.int64),
            "next_index": self.next_index, "counts": dict(self.counts),
        }

    @classmethod
    def from_state_dict(cls, d: dict[str, Any]) -> EditedLevels:
        """An editor rebuilt from `state_dict()` output; ValueError naming the bad field. Which held ids the
        buffer holds is checked by the buffer (`check_held`)."""
        editor = cls.for_family_state([int(v) for v in d["family"]], int(d["num_edits"]), int(d["queue_limit"]),
                                      bool(d["drop_unsolvable"]))
        ids = np.asarray(d["ids"], dtype=np.int64)
        encodings = list(d["encodings"])
        if ids.ndim != 1 or len(encodings) != ids.size or np.unique(ids).size != ids.size:
            raise ValueError("state['editor'] must hold distinct 'ids' and one encoding for each")
        editor.next_index = int(d["next_index"])
        if ids.size and (ids.min() < EDITED_ID_BASE or ids.max() >= EDITED_ID_BASE + editor.next_index):
            raise ValueError(f"state['editor']['ids'] must lie in [{EDITED_ID_BASE}, {EDITED_ID_BASE} + next_index)")
        for level_id, data in zip(ids.tolist(), encodings, strict=True):
            editor.check_saved(level_id, editor.decode(data))
            editor.encodings[level_id] = bytes(data)
        editor.queue = deque(np.asarray(d["queue"], dtype=np.int64).tolist())
        editor.recent = OrderedDict.fromkeys(np.asarray(d["recent"], dtype=np.int64).tolist())
        editor.counts = {k: int(d["counts"][k]) for k in EDITOR_COUNT_KEYS}
        return editor

    def check_saved(self, level_id: int, level: Any) -> None:
        """ValueError where a saved level `level_id` is not of this editor's family (a maze of another size)."""

    def check_held(self, buffered: np.ndarray) -> None:
        """ValueError unless the encodings held are exactly those of the buffered edited levels (`buffered [n]`,
        the buffer's ids), the queued children and the recent ones (a saved state read back)."""
        held = set(self.queue) | set(self.recent) | {i for i in buffered.tolist() if i >= EDITED_ID_BASE}
        if held != set(self.encodings):
            raise ValueError("state['editor'] must hold exactly the encodings of the buffered, queued and recent "
                             "edited levels")

"""Maze levels for `--env maze:<W>x<H>`: the level data, its encoding, the seed generator and the test suite.

A maze is a MiniGrid room of `width x height` INNER cells (the outer wall is implicit and never stored):
inner walls, the agent's start cell and direction, and the goal. Everything here is plain NumPy, so the
config, the level service and evaluation can use it without MiniGrid or Ray; the env builds its grid from a
`MazeLevel`.

Level ids stay int64 and share one space:
- `[0, MAX_SEED)`: a seed; `generate` makes the level from it (domain randomisation, as DCD's generator).
- `[SUITE_ID_BASE, SUITE_ID_BASE + len(suite_names()))`: the hand-designed test suite, in name order.
- `[FILE_ID_BASE, EDITED_ID_BASE)`: the mazes a user brings as files (`families.maze.files`, `levelray
  evaluate --levels maze-file:PATH`), played from their encodings; no function here resolves them.
- `[EDITED_ID_BASE, ...)`: reserved for levels that exist only as an encoding (edited levels, held by the
  level service); no function here resolves them.
Every non-seed id is at least `LEVEL_ID_BASE = 2**40`, far above any seed, so the ranges can never collide.

Coordinates are `(x, y)` over the inner cells, 0-based, `x` to the right and `y` down; arrays are indexed
`[y, x]`. Directions are MiniGrid's: 0 right, 1 down, 2 left, 3 up.
"""

from __future__ import annotations

import functools
import numbers
import re
from dataclasses import dataclass
from importlib import resources

import numpy as np

from levelray.contracts.config_env import parse_blocks
from levelray.contracts.levels import EDITED_ID_BASE, LEVEL_ID_BASE, MAX_SEED
from levelray.families.maze.text import ARROWS as _ARROWS
from levelray.families.maze.text import parse_grid

__all__ = [
    "EDITED_ID_BASE",
    "ENCODING_VERSION",
    "ENV_FORM",
    "ENV_PREFIX",
    "FILE_ID_BASE",
    "LEVEL_ID_BASE",
    "MAX_SIZE",
    "MIN_SIZE",
    "SUITE_ID_BASE",
    "MazeLevel",
    "generate",
    "is_seed",
    "level_for_id",
    "maze_size",
    "parse_blocks",
    "render_rgb",
    "shortest_path_length",
    "suite_level",
    "suite_level_id",
    "suite_name_for_id",
    "suite_names",
]

ENCODING_VERSION = 1
SUITE_ID_BASE = LEVEL_ID_BASE
FILE_ID_BASE = LEVEL_ID_BASE + (1 << 31)
MIN_SIZE = 3
MAX_SIZE = 63

ENV_PREFIX = "maze:"
ENV_FORM = "maze:<W>x<H>"
_ENV_ID = re.compile(r"^maze:(\d+)x(\d+)$")

_HEADER_BYTES = 8  # version, width, height, agent x, agent y, agent dir, goal x, goal y: one byte each
_SUITE_PACKAGE = "levelray.families.maze"
_SUITE_FOLDER = "suite"


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def maze_size(env_id: str) -> tuple[int, int]:
    """`maze:13x9` -> `(13, 9)`, the inner width and height; ValueError naming the form `maze:<W>x<H>` and the
    sizes allowed for anything else. Here rather than beside the env (`families.maze.env`) so that the level
    service, which measures the levels it holds, reads the size without importing the env libraries."""
    m = _ENV_ID.match(env_id) if isinstance(env_id, str) else None
    sizes = f"W and H the inner width and height, each in [{MIN_SIZE}, {MAX_SIZE}], e.g. maze:13x13"
    if m is None:
        raise ValueError(f"maze env id {env_id!r} is not of the form {ENV_FORM} ({sizes})")
    width, height = int(m.group(1)), int(m.group(2))
    if not (MIN_SIZE <= width <= MAX_SIZE and MIN_SIZE <= height <= MAX_SIZE):
        raise ValueError(f"maze env id {env_id!r}: {ENV_FORM} needs {sizes}")
    return width, height


def _check_cell(name: str, cell, width: int, height: int) -> tuple[int, int]:
    if not (isinstance(cell, tuple | list | np.ndarray) and len(cell) == 2 and all(_is_int(v) for v in cell)):
        raise ValueError(f"MazeLevel.{name} must be an (x, y) pair of ints, got {cell!r}")
    x, y = int(cell[0]), int(cell[1])
    if not (0 <= x < width and 0 <= y < height):
        raise ValueError(f"MazeLevel.{name} must be inside the {width}x{height} inner grid "
                         f"(0 <= x < {width}, 0 <= y < {height}), got {(x, y)}")
    return x, y


@dataclass(frozen=True)
class MazeLevel:
    """One maze: `walls [height, width] bool` (True = wall, inner cells only), the agent's start cell and
    direction, and the goal cell.

    Immutable and compared by value: `walls` is a read-only copy, and equality and the hash are those of
    `encode()`, so a level can be a dict key or be deduplicated. Pickling goes through the encoding, so a
    level sent to another process is immutable there too.
    """

    width: int
    height: int
    walls: np.ndarray
    agent: tuple[int, int]
    agent_dir: int
    goal: tuple[int, int]

    def __post_init__(self) -> None:
        for name in ("width", "height"):
            value = getattr(self, name)
            if not _is_int(value) or not MIN_SIZE <= value <= MAX_SIZE:
                raise ValueError(f"MazeLevel.{name} must be an int in [{MIN_SIZE}, {MAX_SIZE}], got {value!r}")
            object.__setattr__(self, name, int(value))
        walls = np.array(self.walls, copy=True)
        if walls.shape != (self.height, self.width) or walls.dtype.kind not in "biu":
            raise ValueError(f"MazeLevel.walls must be a [height, width] = [{self.height}, {self.width}] bool "
                             f"array, got shape {walls.shape} dtype {walls.dtype}")
        if walls.dtype != bool and not np.isin(walls, (0, 1)).all():
            raise ValueError("MazeLevel.walls must hold only 0/1 (False/True) values")
        walls = walls.astype(bool)
        free = walls.size - int(walls.sum())
        if free < 2:
            raise ValueError(f"MazeLevel.walls must leave at least 2 free cells (the agent's and the goal's), got "
                             f"{free} in a {self.width}x{self.height} maze")
        walls.flags.writeable = False
        object.__setattr__(self, "walls", walls)
        agent = _check_cell("agent", self.agent, self.width, self.height)
        goal = _check_cell("goal", self.goal, self.width, self.height)
        object.__setattr__(self, "agent", agent)
        object.__setattr__(self, "goal", goal)
        if not _is_int(self.agent_dir) or not 0 <= self.agent_dir <= 3:
            raise ValueError(f"MazeLevel.agent_dir must be an int in 0..3 (0 right, 1 down, 2 left, 3 up), "
                             f"got {self.agent_dir!r}")
        object.__setattr__(self, "agent_dir", int(self.agent_dir))
        for name, (x, y) in (("agent", agent), ("goal", goal)):
            if walls[y, x]:
                raise ValueError(f"MazeLevel.{name} {(x, y)} is on a wall: it must be a floor cell")
        if agent == goal:
            raise ValueError(f"MazeLevel.agent and MazeLevel.goal must be different cells, both are {agent}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MazeLevel):
            return NotImplemented
        return self.encode() == other.encode()

    def __hash__(self) -> int:
        return hash(self.encode())

    def __repr__(self) -> str:
        return (f"MazeLevel({self.width}x{self.height}, {self.num_walls} walls, agent={self.agent}, "
                f"agent_dir={self.agent_dir}, goal={self.goal})")

    def __reduce__(self):
        return MazeLevel.decode, (self.encode(),)

    @property
    def num_walls(self) -> int:
        """How many inner cells are walls."""
        return int(self.walls.sum())

    def mirrored(self) -> MazeLevel:
        """The level flipped left to right: column x becomes width - 1 - x and an agent facing right faces left
        (up and down stay). Every path maps onto a path of the same length, turning the other way at each
        corner, so a mirrored maze is exactly as hard for a policy without a preferred hand: playing a suite and
        its mirror tells a skill apart from a habit of turning one way."""
        flip = {0: 2, 2: 0}
        return MazeLevel(self.width, self.height, self.walls[:, ::-1], (self.width - 1 - self.agent[0], self.agent[1]),
                         flip.get(self.agent_dir, self.agent_dir), (self.width - 1 - self.goal[0], self.goal[1]))

    def encode(self) -> bytes:
        """Compact, versioned bytes: an 8-byte header (version, width, height, agent x, agent y, agent dir,
        goal x, goal y) then the wall bitmap row by row, packed 8 cells a byte with zero padding
        (`8 + ceil(width*height/8)` bytes: 30 at 13x13). One level has exactly one encoding."""
        header = bytes((ENCODING_VERSION, self.width, self.height, *self.agent, self.agent_dir, *self.goal))
        return header + np.packbits(self.walls.reshape(-1)).tobytes()

    @classmethod
    def decode(cls, data: bytes) -> MazeLevel:
        """The level `encode()` wrote; ValueError naming what is wrong (version, length, size, cells)."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise ValueError(f"a maze encoding must be bytes, got {type(data).__name__}")
        data = bytes(data)
        if len(data) < _HEADER_BYTES:
            raise ValueError(f"maze encoding truncated: {len(data)} bytes, the header alone is {_HEADER_BYTES}")
        version, width, height, ax, ay, agent_dir, gx, gy = data[:_HEADER_BYTES]
        if version != ENCODING_VERSION:
            raise ValueError(f"maze encoding version {version} is not supported (this code reads version "
                             f"{ENCODING_VERSION})")
        for name, value in (("width", width), ("height", height)):
            if not MIN_SIZE <= value <= MAX_SIZE:
                raise ValueError(f"maze encoding {name} {value} is outside [{MIN_SIZE}, {MAX_SIZE}]")
        cells = width * height
        expected = _HEADER_BYTES + (cells + 7) // 8
        if len(data) != expected:
            what = "truncated" if len(data) < expected else "has extra bytes"
            raise ValueError(f"maze encoding {what}: {len(data)} bytes, a {width}x{height} maze takes {expected}")
        bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8, offset=_HEADER_BYTES))
        if bits[cells:].any():
            raise ValueError("maze encoding has non-zero padding bits after the wall bitmap")
        walls = bits[:cells].reshape(height, width).astype(bool)
        return cls(width, height, walls, (ax, ay), agent_dir, (gx, gy))

    def to_text(self) -> str:
        """The inner grid as text, one row per line: `#` wall, `.` floor, `G` goal, and the agent as an
        arrow facing its direction (`>` right, `v` down, `<` left, `^` up), so `from_text` reads it back
        exactly."""
        rows = [["#" if wall else "." for wall in row] for row in self.walls]
        rows[self.goal[1]][self.goal[0]] = "G"
        rows[self.agent[1]][self.agent[0]] = _ARROWS[self.agent_dir]
        return "\n".join("".join(row) for row in rows) + "\n"

    @classmethod
    def from_text(cls, text: str, agent_dir: int = 0) -> MazeLevel:
        """A level from a text grid of the inner cells: `#` wall, `.` floor, `G` goal, and the agent as `A`
        (facing `agent_dir`) or an arrow `>v<^` (facing that way; the arrow wins over `agent_dir`).
        Blank lines and lines starting with `;` (comments) are skipped; every row must be as long as the
        first. Errors name the row and column (1-based, counting grid rows only); a maze file's name its line
        and character (`families.maze.files`)."""
        grid = parse_grid(text, agent_dir)
        height, width = grid.walls.shape
        return cls(width, height, grid.walls, grid.agent, grid.agent_dir, grid.goal)


def shortest_path_length(level: MazeLevel) -> int | None:
    """The fewest moves between 4-neighbouring floor cells from the agent to the goal (breadth-first
    search); None when the goal is unreachable. Counts cell moves only: the MiniGrid agent also spends a
    step on every turn, so an episode needs at least this many steps.

    Over flat Python lists rather than NumPy element access (each of which costs a NumPy scalar): the level
    service searches every child ACCEL's editor makes and every level it measures (7x faster than a deque over
    the array, measured at 13x13)."""
    width = level.width
    free = (~level.walls).reshape(-1).tolist()  # [height * width], row-major: cell (x, y) is y * width + x
    start = level.agent[1] * width + level.agent[0]
    goal = level.goal[1] * width + level.goal[0]
    distance = [-1] * len(free)
    distance[start] = 0
    frontier = [start]
    while frontier:
        grown = []
        for cell in frontier:
            if cell == goal:
                return distance[cell]
            x = cell % width
            for nxt, inside in ((cell + 1, x + 1 < width), (cell - 1, x > 0), (cell + width, cell + width < len(free)),
                                (cell - width, cell >= width)):
                if inside and free[nxt] and distance[nxt] < 0:
                    distance[nxt] = distance[cell] + 1
                    grown.append(nxt)
        frontier = grown
    return None


def _check_blocks(blocks: tuple[int, int]) -> tuple[int, int]:
    if not (isinstance(blocks, tuple | list) and len(blocks) == 2 and all(_is_int(b) for b in blocks)
            and 0 <= blocks[0] <= blocks[1]):
        raise ValueError(f"blocks must be an inclusive (low, high) pair with 0 <= low <= high (as parse_blocks "
                         f"returns), got {blocks!r}")
    return int(blocks[0]), int(blocks[1])


def generate(seed: int, width: int, height: int, blocks: tuple[int, int]) -> MazeLevel:
    """The domain-randomised level of `seed` (DCD's generator): a wall count drawn uniformly from the
    inclusive range `blocks`, that many walls at distinct random cells, then the goal and the agent at two
    distinct random free cells and a random direction.

    The same seed and arguments give the same level on every machine (NumPy's PCG64 from the seed; NumPy
    is pinned, as its `Generator` streams may change between releases). The count is capped so that at
    least two cells stay free. Nothing checks that the goal is reachable: as in DCD, some generated levels
    are unsolvable, and a curriculum learns to stop replaying them."""
    if not _is_int(seed) or not 0 <= seed < MAX_SEED:
        raise ValueError(f"seed must be an int in [0, {MAX_SEED}) (a level id that is a seed), got {seed!r}")
    for name, value in (("width", width), ("height", height)):
        if not _is_int(value) or not MIN_SIZE <= value <= MAX_SIZE:
            raise ValueError(f"maze {name} must be an int in [{MIN_SIZE}, {MAX_SIZE}], got {value!r}")
    low, high = _check_blocks(blocks)
    rng = np.random.default_rng(int(seed))
    cells = width * height
    count = min(int(rng.integers(low, high + 1)), cells - 2)
    walls = np.zeros(cells, dtype=bool)
    walls[rng.choice(cells, size=count, replace=False)] = True
    goal, agent = rng.choice(np.flatnonzero(~walls), size=2, replace=False)
    agent_dir = int(rng.integers(4))
    return MazeLevel(width, height, walls.reshape(height, width), (int(agent % width), int(agent // width)),
                     agent_dir, (int(goal % width), int(goal // width)))


@functools.cache
def _suite() -> dict[str, MazeLevel]:
    """Every suite maze by name, read once from the package data `suite/<name>.txt`."""
    folder = resources.files(_SUITE_PACKAGE).joinpath(_SUITE_FOLDER)
    mazes = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".txt"):
            name = entry.name[: -len(".txt")]
            try:
                mazes[name] = MazeLevel.from_text(entry.read_text(encoding="utf-8"))
            except ValueError as e:
                raise ValueError(f"suite maze {entry.name}: {e}") from None
    return mazes


def suite_names() -> list[str]:
    """The names of the hand-designed test mazes, sorted (the order their ids follow)."""
    return sorted(_suite())


def suite_level(name: str) -> MazeLevel:
    """The suite maze `name`; KeyError listing the known names."""
    mazes = _suite()
    if name not in mazes:
        raise KeyError(f"unknown suite maze {name!r}: known mazes are {', '.join(sorted(mazes))}")
    return mazes[name]


def suite_level_id(name: str) -> int:
    """The level id of suite maze `name`: `SUITE_ID_BASE + its index in suite_names()`. Ids follow the
    name order, so they are stable for a given suite; results are reported by name."""
    suite_level(name)
    return SUITE_ID_BASE + suite_names().index(name)


def suite_name_for_id(level_id: int) -> str:
    """The suite maze whose id is `level_id`; ValueError for any other id."""
    names = suite_names()
    if not _is_int(level_id) or not SUITE_ID_BASE <= level_id < SUITE_ID_BASE + len(names):
        raise ValueError(f"level id {level_id!r} is not a suite maze id (those are in [{SUITE_ID_BASE}, "
                         f"{SUITE_ID_BASE + len(names)}))")
    return names[int(level_id) - SUITE_ID_BASE]


def is_seed(level_id: int) -> bool:
    """Whether `level_id` is a seed (in `[0, MAX_SEED)`), i.e. a level `generate` makes."""
    return _is_int(level_id) and 0 <= level_id < MAX_SEED


def level_for_id(level_id: int, width: int, height: int, blocks: tuple[int, int]) -> MazeLevel:
    """The level an id names in a `width x height` family with `blocks` walls: a seed is generated, a
    suite id is its maze (ValueError if the maze is not of the family's size), and any other id is a
    ValueError naming the ranges (edited levels are held by the level service, not resolved here)."""
    if is_seed(level_id):
        return generate(int(level_id), width, height, blocks)
    names = suite_names()
    if _is_int(level_id) and SUITE_ID_BASE <= level_id < SUITE_ID_BASE + len(names):
        name = names[int(level_id) - SUITE_ID_BASE]
        level = suite_level(name)
        if (level.width, level.height) != (width, height):
            raise ValueError(f"suite maze {name!r} (level id {level_id}) is {level.width}x{level.height}, "
                             f"the maze family is {width}x{height}")
        return level
    raise ValueError(f"unknown level id {level_id!r}: seeds are in [0, {MAX_SEED}), suite mazes in "
                     f"[{SUITE_ID_BASE}, {SUITE_ID_BASE + len(names)}), and maze files' levels (from "
                     f"{FILE_ID_BASE}) and edited levels (from {EDITED_ID_BASE}, held by the level service) exist "
                     f"only as encodings that come with their ids")


_COLOURS = {"floor": (0, 0, 0), "wall": (128, 128, 128), "agent": (220, 40, 40), "goal": (40, 200, 40),
            "facing": (255, 220, 0)}


def render_rgb(level: MazeLevel, tile: int = 8) -> np.ndarray:
    """A top-down picture of the inner cells, `[height*tile, width*tile, 3] uint8`: walls grey, floor
    black, the goal green, the agent red with a yellow bar on the side it faces."""
    if not _is_int(tile) or tile < 1:
        raise ValueError(f"tile must be a positive int (pixels per cell), got {tile!r}")
    cells = np.zeros((level.height, level.width, 3), dtype=np.uint8)
    cells[level.walls] = _COLOURS["wall"]
    cells[level.goal[1], level.goal[0]] = _COLOURS["goal"]
    cells[level.agent[1], level.agent[0]] = _COLOURS["agent"]
    image = np.repeat(np.repeat(cells, tile, axis=0), tile, axis=1)
    bar = max(1, tile // 4)
    x0, y0 = level.agent[0] * tile, level.agent[1] * tile
    side = {0: (slice(y0, y0 + tile), slice(x0 + tile - bar, x0 + tile)),
            1: (slice(y0 + tile - bar, y0 + tile), slice(x0, x0 + tile)),
            2: (slice(y0, y0 + tile), slice(x0, x0 + bar)),
            3: (slice(y0, y0 + bar), slice(x0, x0 + tile))}[level.agent_dir]
    if tile >= 2:
        image[side] = _COLOURS["facing"]
    return image

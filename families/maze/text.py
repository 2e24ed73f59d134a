"""The text form of a maze, read: what `MazeLevel.from_text` and a maze file (`families.maze.files`) share.

One row of text per row of inner cells: `#` wall, `.` floor, `G` goal, and the agent as `A` (facing a given
direction) or an arrow `>v<^` (facing that way: right, down, left, up). Blank lines and lines starting with `;`
(comments) are skipped; trailing spaces are dropped; every row must be as long as the first. An error names
where it is as its reader counts: `MazeLevel.from_text` by grid row and column (comments not counted), a file
by line and character of the file (`lines=True`).

Apart from `families.maze.level` so that a file's errors can name its lines; this module builds no `MazeLevel`
(that module imports it), it returns the parts of one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ARROWS = ">v<^"  # the agent facing MiniGrid direction 0, 1, 2, 3
_CELLS = "# wall, . floor, G goal, A or >v<^ agent"


@dataclass(frozen=True)
class GridText:
    """The parts of a maze read from text: `walls [height, width] bool`, the agent `(x, y)` and direction, the
    goal `(x, y)`, and `lines [height]`, the 1-based line of the text each grid row was on."""

    walls: np.ndarray
    agent: tuple[int, int]
    agent_dir: int
    goal: tuple[int, int]
    lines: list[int]


class _Where:
    """Where a cell is, as an error names it: `row 2 column 3` (grid rows) or `line 7 character 3` (the text's
    own lines, `lines` holding each grid row's line)."""

    def __init__(self, prefix: str, lines: list[int] | None):
        self.prefix, self.lines = prefix, lines

    def cell(self, y: int, x: int) -> str:
        return f"row {y + 1} column {x + 1}" if self.lines is None else f"line {self.lines[y]} character {x + 1}"

    def uneven(self, y: int, length: int, width: int) -> str:
        if self.lines is None:
            return f"{self.prefix} row {y + 1} has {length} cells, row 1 has {width}: rows must be equally long"
        return (f"{self.prefix} {self.cell(y, min(length, width))}: the row has {length} cells, the first row "
                f"(line {self.lines[0]}) has {width}: rows must be equally long")

    def none_of(self) -> str:
        return "none" if self.lines is None else f"none in lines {self.lines[0]}-{self.lines[-1]}"


def parse_grid(text: str, agent_dir: int = 0, *, prefix: str = "maze text", lines: bool = False) -> GridText:
    """The maze drawn in `text` (see the module doc); ValueError starting with `prefix` and naming the row and
    column, or with `lines` the line and character, of what is wrong."""
    numbered = [(n, line.rstrip()) for n, line in enumerate(text.splitlines(), start=1)
                if line.strip() and not line.lstrip().startswith(";")]
    if not numbered:
        raise ValueError(f"{prefix} has no grid rows")
    rows = [row for _, row in numbered]
    where = _Where(prefix, [n for n, _ in numbered] if lines else None)
    width, height = len(rows[0]), len(rows)
    agents: list[tuple[int, int, int]] = []
    goals: list[tuple[int, int]] = []
    walls = np.zeros((height, width), dtype=bool)
    for y, row in enumerate(rows):
        if len(row) != width:
            raise ValueError(where.uneven(y, len(row), width))
        for x, char in enumerate(row):
            if char == "#":
                walls[y, x] = True
            elif char == "G":
                goals.append((x, y))
            elif char == "A" or char in ARROWS:
                agents.append((x, y, agent_dir if char == "A" else ARROWS.index(char)))
            elif char != ".":
                raise ValueError(f"{prefix} {where.cell(y, x)}: unknown cell {char!r} (expected {_CELLS})")
    for name, found in (("agent (A or >v<^)", agents), ("goal (G)", goals)):
        if len(found) != 1:
            cells = ", ".join(where.cell(c[1], c[0]) for c in found) or where.none_of()
            raise ValueError(f"{prefix} must have exactly one {name}, found {len(found)}: {cells}")
    (ax, ay, direction), (goal,) = agents[0], goals
    return GridText(walls, (ax, ay), direction, goal, [n for n, _ in numbered])

"""Mazes a user brings: text files in the test suite's format (`families/maze/suite/*.txt`, the text form of
`families.maze.text`), one maze a file, read into `MazeLevel`s named after their files.

`read_maze_files(path)` reads one file (`mazes/corridor.txt`, the maze `corridor`) or every `*.txt` file of a
folder, in name order (other files are left alone). A file that is not a maze is refused naming the file and the
line and character of what is wrong (`mazes/corridor.txt line 4 character 7: unknown cell 'x' ...`), as is
a file that is not UTF-8 text or a folder without `.txt` files. `levelray evaluate --levels maze-file:PATH` plays
each maze as a level set of its own (`deploy.evaluation.level_sets`), from its encoding under an id from `FILE_ID_BASE`.
"""

from __future__ import annotations

import os
from pathlib import Path

from levelray.families.maze.level import MazeLevel
from levelray.families.maze.text import parse_grid

SUFFIX = ".txt"


def read_maze_file(path: str | os.PathLike) -> MazeLevel:
    """The maze of the text file `path`; ValueError naming the file, line and character of what is wrong."""
    path = Path(path)
    name = f"maze file {path}"
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"{name}: cannot be read ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        character = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ValueError(f"{name} line {line} character {character}: not UTF-8 text (byte "
                         f"{data[exc.start]:#04x})") from None
    grid = parse_grid(text, prefix=name, lines=True)
    height, width = grid.walls.shape
    try:
        return MazeLevel(width, height, grid.walls, grid.agent, grid.agent_dir, grid.goal)
    except ValueError as exc:  # a size outside [MIN_SIZE, MAX_SIZE]: the grid as a whole, from its first row
        raise ValueError(f"{name} line {grid.lines[0]} character 1: {exc}") from None


def read_maze_files(path: str | os.PathLike) -> dict[Path, MazeLevel]:
    """`{file: level}` of the maze file `path` or of every `*.txt` file in the folder `path`, in name order (a
    maze's name is its file's, `file.stem`); ValueError naming the file (and line and character) that cannot be
    read."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.name.endswith(SUFFIX) and p.is_file())
        if not files:
            raise ValueError(f"maze folder {path} has no {SUFFIX} files (one maze a file, in the test suite's "
                             f"format)")
    elif path.exists():
        files = [path]
    else:
        raise ValueError(f"maze file {path} does not exist (expected a text file of one maze, or a folder of them)")
    return {file: read_maze_file(file) for file in files}

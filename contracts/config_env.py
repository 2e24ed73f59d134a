"""The `env` section of the run config (`EnvConfig`): which environment a run plays, and its levels.

Apart from `contracts.config`, which imports it from here (and every other module imports it from there).
What needs the env library (whether an id exists, a family's own spelling such as `maze:<W>x<H>`) is checked
when the env is built (`actors.envs`), before a run starts; `env.maze_blocks`, a plain string, is checked with
the rest of the config (`contracts.validate`).
"""

from __future__ import annotations

import numbers
import re
from dataclasses import dataclass, field

from levelray.contracts.config_values import Section, flag
from levelray.contracts.plugins import check_plugin_name

# DCD's maze setting for PLR-perp (Jiang et al. 2021b): 25 walls in a 13x13 maze.
DEFAULT_MAZE_BLOCKS = "25"


_BLOCKS_FORM = "a number such as 25 or a range such as 0-60"


def parse_blocks(spec: str | int) -> tuple[int, int]:
    """`--maze-blocks` as an inclusive `(low, high)` range of wall counts: "25" or 25 -> (25, 25),
    "0-60" -> (0, 60). ValueError naming the flag and the expected form. Here, with the leaf it reads, so that the
    config checks it without the maze family (`families.maze`, which generates levels with it)."""
    if isinstance(spec, numbers.Integral) and not isinstance(spec, bool):
        if spec < 0:
            raise ValueError(f"--maze-blocks must be {_BLOCKS_FORM} (non-negative), got {spec!r}")
        return int(spec), int(spec)
    match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", spec) if isinstance(spec, str) else None
    if match is None:
        raise ValueError(f"--maze-blocks must be {_BLOCKS_FORM}, got {spec!r}")
    low = int(match.group(1))
    high = low if match.group(2) is None else int(match.group(2))
    if low > high:
        raise ValueError(f"--maze-blocks range {spec!r} runs backwards: write it low-high, such as 0-60")
    return low, high


def _check_maze_blocks(text: str) -> None:
    """ValueError naming --maze-blocks and its form for text `parse_blocks` cannot read."""
    parse_blocks(text)


def _check_family(name: str) -> None:
    """`env.family`: auto or a plug-in's name (`contracts.plugins`); whether it loads: where envs are built."""
    if name != "auto":
        check_plugin_name(name)


@dataclass(frozen=True)
class EnvConfig(Section):
    id: str = field(
        default="procgen:bigfish",
        metadata=flag("--env", "environment: procgen:<game>, minigrid:<name> (e.g. minigrid:DoorKey-8x8), "
                               "maze:<W>x<H> (e.g. maze:13x13, the inner size), atari:<game> (e.g. "
                               "atari:breakout = ALE/Breakout-v5) or any gymnasium id (e.g. CartPole-v1)"),
    )
    family: str = field(
        default="auto",
        metadata=flag("--env-family", "the env family that builds env.id: auto (the built-in whose ids include it), a "
                      "built-in's name (procgen, minigrid, maze, atari, gymnasium) or module:attribute of your own "
                      "(an object with matches, make_vector, spec and ids: contracts.families.EnvFamily)",
                      check=_check_family),
    )
    distribution_mode: str = field(
        default="easy", metadata=flag("--distribution-mode", "procgen distribution mode", choices=("easy", "hard"))
    )
    num_levels: int = field(
        default=200, metadata=flag("--num-levels", "size of the training level set (0 = unbounded)", min=0)
    )
    start_level: int = field(default=0, metadata=flag("--start-level", "first seed of the training level set", min=0))
    max_episode_steps: int | None = field(
        default=None,
        metadata=flag("--max-episode-steps", "gymnasium time limit override (truncation; MiniGrid's max_steps; "
                      "Atari: agent steps, within ALE's 108,000 frames)",
                      min=1),
    )
    native_vector: bool = field(
        default=True,
        metadata=flag("--native-vector", "step CartPole's K envs as one NumPy array (same episodes, same levels)",
                      resumable=True),
    )
    maze_blocks: str = field(
        default=DEFAULT_MAZE_BLOCKS,
        metadata=flag("--maze-blocks", "maze:<W>x<H>: walls of a level generated from a seed, a number or a range "
                      "such as 0-60 (each level draws its count uniformly from it); 25 is DCD's PLR-perp setting",
                      check=_check_maze_blocks, numbers_as_text=True),
    )
    maze_view: str = field(
        default="minigrid",
        metadata=flag("--maze-view", "maze:<W>x<H>: what the agent sees: minigrid (MiniGrid's 7x7 view, walls "
                      "hide what is behind them) or dcd (DCD's 5x5 view through walls, the view its published maze "
                      "results were trained with)", choices=("minigrid", "dcd")),
    )


def is_atari(env_id: str) -> bool:
    """`atari:<game>`, `ALE/<Game>-vN` or `<Game>NoFrameskip-v4` (by name: ale_py is not imported here)."""
    return env_id.startswith(("atari:", "ALE/")) or bool(re.match(r"^[A-Za-z0-9]+NoFrameskip-v4$", env_id))

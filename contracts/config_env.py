"""The `env` section of the run config (`EnvConfig`): which environment a run plays, and its levels.

Apart from `contracts.config`, which imports it from here (and every other module imports it from there).
What needs the env library (whether an id exists, a family's own spelling such as `maze:<W>x<H>`) is checked
when the env is built (`actors.envs`), before a run starts; `env.maze_blocks`, a plain string, is checked with
the rest of the config (`contracts.validate`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from levelray.contracts.config_values import Section, flag
from levelray.contracts.plugins import check_plugin_name

# DCD's maze setting for PLR-perp (Jiang et al. 2021b): 25 walls in a 13x13 maze.
DEFAULT_MAZE_BLOCKS = "25"


def _check_maze_blocks(text: str) -> None:
    """ValueError naming --maze-blocks and its form for text `contracts.maze.parse_blocks` cannot read (imported
    here, not at the top: the config is read before anything else and needs none of the maze code)."""
    from levelray.contracts.maze import parse_blocks

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
                      "(an object with matches, make_vector, spec and ids: actors.envs.EnvFamily)",
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


def is_atari(env_id: str) -> bool:
    """`atari:<game>`, `ALE/<Game>-vN` or `<Game>NoFrameskip-v4` (by name: ale_py is not imported here)."""
    return env_id.startswith(("atari:", "ALE/")) or bool(re.match(r"^[A-Za-z0-9]+NoFrameskip-v4$", env_id))

"""The maze family (`--env maze:<W>x<H>`), all in this folder: the levels (`level`: encoding, generator, the test
suite in `suite/`; `text` and `files`, mazes as text), the vector env (`env`, stepped by `step`; `grid`, the
MiniGrid env it matches), ACCEL's editor (`editor`, `--level-editor accel`), the statistics of the levels a level
service holds (`stats`), the level sets `levelray evaluate` plays (`level_sets`) and its preset (below).

This module is the family (`contracts.families`): the env side's four functions, the level side, and the time
limit a config plays with (`max_episode_steps`).
"""

from levelray.contracts.config import EnvConfig
from levelray.contracts.families import register_family
from levelray.families.maze import (
    editor,  # noqa: F401  (registers ACCEL's maze editor, `accel`)
    level,  # the levels, for the report's suite figure (`deploy.report.gallery`)
)
from levelray.families.maze.env import ids, make_vector, matches, max_episode_steps, spec
from levelray.families.maze.level_sets import MazeLevelSets
from levelray.families.maze.stats import level_statistics

__all__ = ["DISPATCH_RANK", "FIXED_SET_DEFAULTS", "PRESET", "PRESET_DEFAULTS", "ids", "level", "level_sets",
           "level_statistics", "make_vector", "matches", "max_episode_steps", "reports_success", "spec"]

DISPATCH_RANK = 30  # where `env.family auto` tries it (contracts.families)
# A maze is a MiniGrid env to the agent (the same view, actions and network): the minigrid preset, with what DCD's
# maze runs use beyond it: discount 0.995 (DCD's train_scripts for its MiniGrid mazes), where a 13x13 maze's
# episodes of up to 250 steps would lose most of a late goal's reward at 0.99 (`contracts.presets`). On a fixed set
# (`--num-levels N`) levels are drawn uniformly: PLR's defaults were behind uniform sampling on 200 mazes in 5 of 6
# seeds and never ahead, -0.21 ± 0.18 held-out success at 50 walls (benchmarks/RESULTS.md, "Where PLR's defaults
# hurt"), its rank transform at temperature 0.1 putting 0.9 of the replays on one level; PLR is asked for by name
# (`--level-strategy`). The unbounded space (`--num-levels 0`) keeps PLR's level buffer, where no such result is.
PRESET = "minigrid"
PRESET_DEFAULTS = {"learner.discount": 0.995}
FIXED_SET_DEFAULTS = {"levels.strategy": "random"}
level_sets = MazeLevelSets()


def reports_success(env: EnvConfig) -> bool:
    """Every maze episode says whether the agent reached the goal (`env`'s step): what SFL's success rates read."""
    return True


register_family("maze", __name__)  # at the end: the family is this module's names above

"""The level sets an evaluation plays (`levelray evaluate --levels`, comma-separated):

- `train`: the config's training levels `[start_level, start_level + num_levels)`, in a random order
  drawn from `--seed` (cycled when there are more episodes than levels).
- `test`: held-out levels, the "full distribution" of the PLR paper: distinct random seeds from
  `[0, 2**31 - 1)` outside the training range (procgen levels; gymnasium and MiniGrid `reset(seed=...)`
  seeds).
  With an unbounded training set (`num_levels == 0`) nothing is held out; the result says so
  (`held_out: false`).
- `A-B`: the explicit seeds A to B, both included, in order.

An env family may have level sets of its own (`contracts.families.FamilyLevelSets`, the family's `level_sets`): the
maze's `maze-suite`, `maze-<N>` and `maze-file:PATH` (`families.maze.level_sets`). An item is read by the family
that claims it (the built-ins, and the run's own family where it is known), and played only on a run of that
family: any other run refuses it, naming the family it needs (`plan_level_sets`).
"""

from __future__ import annotations

import re

import numpy as np

from levelray.contracts.config import ConfigError, EnvConfig, RunConfig
from levelray.contracts.families import FamilyLevelSets, LevelSet, families, family_name, family_of
from levelray.contracts.levels import MAX_SEED, distinct_random, held_out_seeds, training_range

__all__ = ["LevelSet", "level_set_seeds", "parse_level_sets", "plan_level_sets"]

LEVEL_SET_RE = re.compile(r"^(\d+)-(\d+)$")
GENERIC_FORMS = ["train", "test", "A-B (e.g. 1000-1999)"]


def _family_level_sets(env: EnvConfig | None) -> list[tuple[object, FamilyLevelSets]]:
    """`(family, its level sets)` of the built-in families and the run's own (where `env` is given)."""
    found = list(families())
    if env is not None and family_of(env) not in found:
        found.append(family_of(env))
    return [(family, family.level_sets) for family in found if getattr(family, "level_sets", None) is not None]


def _forms(env: EnvConfig | None) -> str:
    forms = GENERIC_FORMS + [form for _, sets in _family_level_sets(env) for form in sets.forms()]
    return ", ".join(forms[:-1]) + " or " + forms[-1]


def _claimed_by(item: str, env: EnvConfig | None) -> tuple[object, FamilyLevelSets] | None:
    return next(((family, sets) for family, sets in _family_level_sets(env) if sets.claims(item)), None)


def parse_level_sets(text: str, env: EnvConfig | None = None, *, others: bool = False) -> list[str]:
    """`"train,test"` -> `["train", "test"]`; each item is one of the forms of the module doc (A <= B), or one a
    family claims (the built-ins', and the family of `env` where given). `others`: an item no family here claims
    passes, for the run's own family to read once the run is known (`levelray evaluate` before it loads a
    checkpoint)."""
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    if not items:
        raise ConfigError(f"--levels: expected {_forms(env)} (comma-separated), got nothing")
    for item in items:
        if item in ("train", "test"):
            continue
        m = LEVEL_SET_RE.match(item)
        if m is None:
            if _claimed_by(item, env) is None and not others:
                raise ConfigError(f"--levels: expected {_forms(env)}, got {item!r}")
            continue
        if int(m.group(1)) > int(m.group(2)):
            raise ConfigError(f"--levels: range {item!r} is empty (A must be <= B)")
        if int(m.group(2)) >= MAX_SEED:
            raise ConfigError(f"--levels: seeds must be < {MAX_SEED}, got {item!r}")
    if len(set(items)) != len(items):
        raise ConfigError(f"--levels: {text!r} names a level set twice")
    return items

def level_set_seeds(cfg: RunConfig, which: str, episodes: int, seed: int = 0) -> np.ndarray:
    """The seeds (level ids) `[n]` an evaluation of `episodes` episodes on the generic level set `which` plays (see
    the module doc)."""
    rng = np.random.default_rng([seed, 0x1E7E1])
    train = training_range(cfg.env)
    if which == "train":
        if train is None:
            return distinct_random(rng, episodes, cfg.env.start_level, MAX_SEED)
        return rng.permutation(np.arange(*train, dtype=np.int64))
    if which == "test":
        return held_out_seeds(cfg.env, np.random.default_rng([seed, 0x7E57]), episodes)
    m = LEVEL_SET_RE.match(which)
    if m is None:
        raise ConfigError(f"--levels: expected {_forms(cfg.env)}, got {which!r}")
    return np.arange(int(m.group(1)), int(m.group(2)) + 1, dtype=np.int64)


def _family_sets(cfg: RunConfig, item: str, episodes: int, seed: int, planned: list[LevelSet]) -> list[LevelSet]:
    """The sets a family's item stands for, on a run of that family; ConfigError naming the family it needs."""
    family, sets = _claimed_by(item, cfg.env)
    if family is not family_of(cfg.env):
        name = family_name(family)
        raise ConfigError(f"--levels {item}: {name} level sets need a {name} run (--env "
                          f"{' or '.join(family.ids())}); this run's env is {cfg.env.id}")
    return sets.plan(cfg, item, episodes, seed, planned)


def plan_level_sets(cfg: RunConfig, items: list[str], episodes: int, seed: int = 0) -> list[LevelSet]:
    """The level sets `items` (from `parse_level_sets`) of an evaluation of `cfg`'s policy, in order, with a
    family's items expanded into the sets they stand for (`maze-suite` one per maze, a maze named twice played
    once; `maze-file:PATH` one per file); ConfigError for a family's sets on a run of another family, and for a
    set read from a file named as another level set is."""
    out: dict[str, LevelSet] = {}
    for item in items:
        if item in ("train", "test") or LEVEL_SET_RE.match(item):
            sets = [LevelSet(item, level_set_seeds(cfg, item, episodes, seed), cfg.env)]
        else:
            sets = _family_sets(cfg, item, episodes, seed, list(out.values()))
        for level_set in sets:
            known = out.setdefault(level_set.name, level_set)
            if known is not level_set and (known.file or level_set.file):
                family = family_name(family_of(cfg.env))  # in the family's words: "maze file comb.txt"
                files = " and ".join(f"{family} file {s.file}" if s.file else f"the suite's {family}" if s.suite
                                     else "a level set" for s in (known, level_set))
                raise ConfigError(f"--levels: two level sets are named {level_set.name!r} ({files}): each needs "
                                  f"a name of its own (a level set read from a file is named after its file)")
    return list(out.values())

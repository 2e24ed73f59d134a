"""The sweep spec (`levelray sweep SPEC.yaml`): arms x seeds of levelray runs, read and checked whole before anything
starts.

    name: plr-vs-uniform               # optional: the default --dir is sweeps/<name>-<time> (default: the file's stem)
    base:                              # config keys nested as in a run's config.yaml, shared by every arm
      env: {id: minigrid:DoorKey-8x8, num_levels: 200}
      total_steps: 1500000
    arms:                              # arm name -> config keys overriding the base (empty: the base itself)
      uniform: {levels: {strategy: random}}
      plr: {levels: {strategy: value_l1}}
    baseline: uniform                  # the arm every other arm is compared with, seed by seed
    seeds: [0, 1, 2, 3, 4]             # each arm runs once per seed (`seed` of its config)
    evaluate: {levels: train,test, episodes: 100, greedy: false}   # what `levelray evaluate` takes
    resources: {cpu: 1, gpu: 0}        # optional: what each trial asks Ray for; other names are custom resources
    max_failures: 3                    # optional: restarts of a trial whose process or node was lost
    wandb: {project: plr, tags: [procgen]}   # optional: Weights & Biases, one run per trial (below)

`evaluate` may also be a list of evaluations, each `{levels, episodes, greedy, name, max_episode_steps}` (the last
optional, as `levelray evaluate --max-episode-steps`: every level set's time limit): the trial plays each in turn.
At most one goes without a `name`; a name prefixes its metrics (`generated.maze-25.success_rate`) and names its file,
so two evaluations may play the same level sets (sampled and greedy, say). `budgets: [400000, 1000000]` (optional,
in place of `total_steps`) trains each trial to each budget in turn, the same run resumed, and evaluates it at each:
an earlier budget's metrics carry it (`test.return_mean@400000`), the last budget's are the run's final ones.
`budget_unit: trained_steps` (default `env_steps`) counts the budgets in env steps trained on (`samples_trained`,
setting `total_trained_steps`), as DCD compares curricula at equal gradient updates; the config's `total_steps` is
then a cap on env steps that must lie above the last budget, and a trial that reaches it first fails saying so.

`wandb` (a mapping of the `wandb` config section's keys but `enabled`: project, entity, group, tags, mode; `{}` for
the defaults) logs every trial to Weights & Biases as `levelray train --wandb` logs a run, grouped by the sweep (the
group defaults to the sweep directory's name), the arm and seed in its config and tags, and the sweep's results
table once at the end (`deploy.sweep.wandb_log`); the trials' configs take their `wandb` section from it, so `base`
and `arms` have none.

A trial is one arm with one seed: the base, the arm's keys, then the keys the sweep sets itself (`SWEEP_KEYS`: the
trial's run directory and seed, the inline backend, no metrics port; with `budgets`, the key their unit sets), with
the env family's preset filling the keys none of those set, as `levelray train --config` would. Every arm's config
is built and checked (`contracts.validate`) here at every budget, and each evaluation's level sets are planned for
it, so a misspelt key or a value out of range is refused naming its place in the spec (`arms.plr.levels.stratgy`)
before a trial starts. Whether the env can be made is the trial's own first step (`prepare_run_dir`), on the node
that runs it: a trial refused there is reported as failed with the reason, and the other trials go on.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from levelray.contracts.config import ConfigError, RunConfig, from_dict, replace_paths
from levelray.contracts.presets import apply_preset, dict_paths
from levelray.contracts.validate import validate

# Config keys each trial gets from the sweep: its own run directory and seed; the inline backend (a trial is one
# process that Tune places, restarts and accounts for, see docs/guides/experiments.md); no Prometheus port (trials
# sharing a node would ask for the same one); no cluster address (the inline backend starts no Ray job).
SWEEP_KEYS = ("run_dir", "seed", "backend", "address", "metrics_port")
SPEC_KEYS = ("name", "base", "arms", "baseline", "seeds", "evaluate", "budgets", "budget_unit", "resources",
             "max_failures", "wandb")
WANDB_KEYS = ("project", "entity", "group", "tags", "mode")  # the `wandb` section's keys a spec's `wandb` may set
# budget_unit -> (the config key a budget sets, the checkpoint counter that reaches it)
BUDGET_UNITS = {"env_steps": ("total_steps", "env_steps"), "trained_steps": ("total_trained_steps", "samples_trained")}
EVALUATE_KEYS = ("levels", "episodes", "greedy", "name", "max_episode_steps")
ARM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # a trial's run directory is <arm>-seed<seed>
# An evaluation's name is the first part of its dotted metric names and part of a file name: no dots, no '@'
EVALUATION_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
RESERVED_NAMES = ("training",)  # `training.*` are the run's own metrics


@dataclass(frozen=True)
class Evaluation:
    """One `levelray evaluate` of a trial's checkpoint: its level sets, episodes per set, greedy or sampled actions,
    `name` (None: its metrics are `<level set>.<key>`; else `<name>.<level set>.<key>`) and `max_episode_steps`
    (`--max-episode-steps`: every set's time limit; None: each set's own)."""

    levels: tuple[str, ...]
    episodes: int
    greedy: bool = False
    name: str | None = None
    max_episode_steps: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {"levels": ",".join(self.levels), "episodes": self.episodes, "greedy": self.greedy}
        if self.max_episode_steps is not None:
            out["max_episode_steps"] = self.max_episode_steps
        return out if self.name is None else {**out, "name": self.name}


@dataclass(frozen=True)
class SweepSpec:
    """A checked spec. `base` and `arms` are config mappings (YAML's nesting); `evaluations` what each trial plays at
    each budget; `budgets` what a trial trains to in turn, counted in `budget_unit` (empty: its config's
    `total_steps`, once); `resources` Ray's names (`CPU`, `GPU`, custom) -> amounts per trial."""

    name: str
    base: dict
    arms: dict[str, dict]
    baseline: str
    seeds: tuple[int, ...]
    evaluations: tuple[Evaluation, ...]
    budgets: tuple[int, ...] = ()
    budget_unit: str = "env_steps"
    resources: dict[str, float] = field(default_factory=lambda: {"CPU": 1.0})
    max_failures: int = 3
    wandb: dict[str, Any] | None = None  # the spec's `wandb` mapping (None: no W&B)

    def trials(self) -> list[tuple[str, int]]:
        """(arm, seed) of every trial, seed by seed with the arms interleaved (each arm sees the same load)."""
        return [(arm, seed) for seed in self.seeds for arm in self.arms]

    def threads(self) -> int:
        """Torch threads a trial uses: the CPUs it holds (at least one)."""
        return max(1, math.floor(self.resources.get("CPU", 1.0)))

    @property
    def budget_key(self) -> str:
        """The config key each budget sets: `total_steps` or `total_trained_steps`."""
        return BUDGET_UNITS[self.budget_unit][0]

    @property
    def budget_counter(self) -> str:
        """The run's counter a budget is reached by: `env_steps` or `samples_trained`."""
        return BUDGET_UNITS[self.budget_unit][1]

    def to_dict(self) -> dict[str, Any]:
        """The spec in its YAML form (what `load_spec` reads back, and the sweep directory keeps)."""
        resources = {("cpu" if k == "CPU" else "gpu" if k == "GPU" else k): v for k, v in self.resources.items()}
        single = len(self.evaluations) == 1 and self.evaluations[0].name is None
        evaluate = self.evaluations[0].to_dict() if single else [e.to_dict() for e in self.evaluations]
        budgets = {"budgets": list(self.budgets)} if self.budgets else {}
        if self.budget_unit != "env_steps":
            budgets["budget_unit"] = self.budget_unit
        wandb = {} if self.wandb is None else {"wandb": self.wandb}
        return {"name": self.name, "base": self.base, "arms": self.arms, "baseline": self.baseline,
                "seeds": list(self.seeds), "evaluate": evaluate, **budgets, "resources": resources,
                "max_failures": self.max_failures, **wandb}


def trial_name(arm: str, seed: int) -> str:
    """A trial's name and the name of its run directory under DIR/trials/."""
    return f"{arm}-seed{seed}"


def load_spec(source: str | Path | dict, name: str | None = None) -> SweepSpec:
    """Read (a YAML file, or its mapping) and check a spec; raises ConfigError naming the first problem."""
    if not isinstance(source, dict):
        path = Path(source)
        try:
            data = yaml.safe_load(path.read_text())
        except OSError as exc:
            raise ConfigError(f"sweep spec: cannot read {path}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"sweep spec: {path} is not valid YAML: {exc}") from None
        name = name or path.stem
    else:
        data = source
    if not isinstance(data, dict):
        raise ConfigError(f"sweep spec: expected a mapping with keys {', '.join(SPEC_KEYS)}, got "
                          f"{type(data).__name__}")
    unknown = sorted(set(data) - set(SPEC_KEYS))
    if unknown:
        raise ConfigError(f"sweep spec: unknown key {unknown[0]!r}; the keys are {', '.join(SPEC_KEYS)}")
    missing = [key for key in ("arms", "baseline", "seeds", "evaluate") if key not in data]
    if missing:
        raise ConfigError(f"sweep spec: {missing[0]} is missing (needed: arms, baseline, seeds, evaluate)")
    base = _mapping(data.get("base"), "base")
    arms = _arms(data["arms"])
    if data["baseline"] not in arms:
        raise ConfigError(f"sweep spec: baseline must name one of the arms ({', '.join(arms)}), "
                          f"got {data['baseline']!r}")
    unit = _budget_unit(data.get("budget_unit", "env_steps"), data.get("budgets"))
    budgets = _budgets(data.get("budgets"), base, arms, BUDGET_UNITS[unit][0])
    spec = SweepSpec(name=str(data.get("name") or name or "sweep"), base=base, arms=arms, baseline=data["baseline"],
                     seeds=_seeds(data["seeds"]), evaluations=_evaluations(data["evaluate"]), budgets=budgets,
                     budget_unit=unit,
                     resources=_resources(data.get("resources")), max_failures=_count(data.get("max_failures", 3),
                                                                                      "max_failures"),
                     wandb=_wandb(data["wandb"]) if "wandb" in data else None)
    _check_configs(spec)
    return spec


def _mapping(value: Any, where: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"sweep spec: {where} must be a mapping of config keys (as in a run's config.yaml), "
                          f"got {type(value).__name__}")
    for key in SWEEP_KEYS:
        if key in value:
            raise ConfigError(f"sweep spec: {where}.{key} is set by the sweep for each trial; remove it "
                              f"(the sweep sets {', '.join(SWEEP_KEYS)})")
    if "wandb" in value:
        raise ConfigError(f"sweep spec: {where}.wandb: a sweep logs to Weights & Biases with the spec's own wandb "
                          f"key (e.g. wandb: {{project: my-project}}), one W&B run per trial; move it there")
    return value


def _wandb(value: Any) -> dict[str, Any]:
    """`wandb`: a mapping of `WANDB_KEYS`, checked as the `wandb` config section's leaves (`wandb.project`, ...)."""
    from levelray.contracts.config import WandbConfig
    from levelray.deploy.monitoring.wandb_run import require_wandb

    if not isinstance(value, dict):
        raise ConfigError(f"sweep spec: wandb must be a mapping with any of {', '.join(WANDB_KEYS)} ({{}} for the "
                          f"defaults), got {value!r}")
    unknown = sorted(set(value) - set(WANDB_KEYS))
    if unknown:
        raise ConfigError(f"sweep spec: unknown key wandb.{unknown[0]}; its keys are {', '.join(WANDB_KEYS)}")
    try:
        section = from_dict(value, WandbConfig, "wandb.")
    except ConfigError as exc:
        raise ConfigError(f"sweep spec: {exc}") from None
    require_wandb("sweep spec: wandb")
    return {key: getattr(section, key) for key in value}  # as the config reads them (tags "a,b" -> [a, b])


def _arms(value: Any) -> dict[str, dict]:
    if not isinstance(value, dict) or not value:
        raise ConfigError("sweep spec: arms must be a non-empty mapping of arm name -> config keys")
    for name in value:
        if not isinstance(name, str) or not ARM_NAME.match(name):
            raise ConfigError(f"sweep spec: arm name {name!r} must be letters, digits, '_', '.' or '-' (it names "
                              f"the trials' run directories)")
    return {name: _mapping(keys, f"arms.{name}") for name, keys in value.items()}


def _seeds(value: Any) -> tuple[int, ...]:
    ok = isinstance(value, list) and value and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                                   for s in value)
    if not ok:
        raise ConfigError(f"sweep spec: seeds must be a non-empty list of integers >= 0 (e.g. [0, 1, 2]), "
                          f"got {value!r}")
    if len(set(value)) != len(value):
        raise ConfigError(f"sweep spec: seeds names a seed twice: {value}")
    return tuple(value)


def _evaluations(value: Any) -> tuple[Evaluation, ...]:
    """`evaluate`: one evaluation (a mapping) or a non-empty list of them, at most one without a name."""
    if isinstance(value, dict):
        return (_evaluation(value, "evaluate"),)
    if not isinstance(value, list) or not value:
        raise ConfigError(f"sweep spec: evaluate must be a mapping with levels and episodes, or a non-empty list of "
                          f"them, got {value!r}")
    out = tuple(_evaluation(item, f"evaluate[{i}]") for i, item in enumerate(value))
    unnamed = [i for i, e in enumerate(out) if e.name is None]
    if len(unnamed) > 1:
        raise ConfigError(f"sweep spec: evaluate[{unnamed[1]}].name is missing: at most one evaluation goes without "
                          f"a name (a name prefixes its metrics: <name>.<level set>.<key>)")
    names = [e.name for e in out]
    for i, e in enumerate(out):
        if e.name is not None and names.index(e.name) != i:
            raise ConfigError(f"sweep spec: evaluate[{i}].name: {e.name!r} names two evaluations")
    return out


def _evaluation(value: Any, where: str) -> Evaluation:
    from levelray.deploy.evaluation.level_sets import parse_level_sets

    if not isinstance(value, dict):
        raise ConfigError(f"sweep spec: {where} must be a mapping with levels and episodes, got {value!r}")
    unknown = sorted(set(value) - set(EVALUATE_KEYS))
    if unknown:
        raise ConfigError(f"sweep spec: unknown key {where}.{unknown[0]}; its keys are {', '.join(EVALUATE_KEYS)}")
    if "levels" not in value or "episodes" not in value:
        raise ConfigError(f"sweep spec: {where} needs levels (e.g. train,test or maze-suite) and episodes")
    levels = value["levels"]
    text = ",".join(map(str, levels)) if isinstance(levels, list) else str(levels)
    try:
        sets = parse_level_sets(text)
    except ConfigError as exc:
        raise ConfigError(f"sweep spec: {where}.levels: {str(exc).removeprefix('--levels: ')}") from None
    episodes = _count(value["episodes"], f"{where}.episodes", low=1)
    greedy = value.get("greedy", False)
    if not isinstance(greedy, bool):
        raise ConfigError(f"sweep spec: {where}.greedy must be true or false, got {greedy!r}")
    name = value.get("name")
    if name is not None and (not isinstance(name, str) or not EVALUATION_NAME.match(name) or name in RESERVED_NAMES):
        raise ConfigError(f"sweep spec: {where}.name must be letters, digits and '_', starting with a letter, and "
                          f"not {', '.join(RESERVED_NAMES)} (it prefixes the evaluation's metrics), got {name!r}")
    limit = value.get("max_episode_steps")
    limit = None if limit is None else _count(limit, f"{where}.max_episode_steps", low=1)
    return Evaluation(levels=tuple(sets), episodes=episodes, greedy=greedy, name=name, max_episode_steps=limit)


def _budget_unit(value: Any, budgets: Any) -> str:
    if value not in BUDGET_UNITS:
        raise ConfigError(f"sweep spec: budget_unit must be one of {', '.join(BUDGET_UNITS)}, got {value!r}")
    if value != "env_steps" and budgets is None:
        raise ConfigError(f"sweep spec: budget_unit {value} counts the budgets, but the spec has no budgets "
                          f"(e.g. budgets: [1000000, 2000000])")
    return value


def _budgets(value: Any, base: dict, arms: dict[str, dict], key: str) -> tuple[int, ...]:
    """`budgets`: counts in increasing order, which then set every trial's `key` (`total_steps` or
    `total_trained_steps`)."""
    if value is None:
        return ()
    ok = isinstance(value, list) and value and all(isinstance(b, int) and not isinstance(b, bool) and b >= 1
                                                   for b in value)
    if not ok or any(b <= a for a, b in zip(value, value[1:], strict=False)):
        raise ConfigError(f"sweep spec: budgets must be a non-empty list of step counts in increasing order "
                          f"(e.g. [400000, 1000000]), got {value!r}")
    for where, keys in [("base", base), *((f"arms.{arm}", keys) for arm, keys in arms.items())]:
        if key in keys:
            raise ConfigError(f"sweep spec: {where}.{key}: budgets set each trial's {key} (it trains to "
                              f"each budget in turn); remove one of them")
    return tuple(value)


def _count(value: Any, where: str, low: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ConfigError(f"sweep spec: {where} must be an integer >= {low}, got {value!r}")
    return value


def _resources(value: Any) -> dict[str, float]:
    """`{cpu: 1, gpu: 0, NAME: AMOUNT}` -> Ray's `{"CPU": 1.0, "GPU": 0.0, NAME: AMOUNT}` (cpu defaults to 1)."""
    value = {} if value is None else value
    if not isinstance(value, dict):
        raise ConfigError(f"sweep spec: resources must be a mapping such as {{cpu: 1, gpu: 0}}, got {value!r}")
    out = {"CPU": 1.0}
    for key, amount in value.items():
        if isinstance(amount, bool) or not isinstance(amount, int | float) or not amount >= 0:
            raise ConfigError(f"sweep spec: resources.{key} must be a number >= 0, got {amount!r}")
        out[{"cpu": "CPU", "gpu": "GPU"}.get(str(key).lower(), str(key))] = float(amount)
    if out["CPU"] <= 0:
        raise ConfigError("sweep spec: resources.cpu must be > 0 (a trial is a process that trains)")
    return out


def merge_config(base: dict, over: dict) -> dict:
    """`base` with `over`'s keys laid over it, section by section."""
    out = dict(base)
    for key, value in over.items():
        nested = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = merge_config(out[key], value) if nested else value
    return out


def trial_config(spec: SweepSpec, arm: str, seed: int, run_dir: str | Path, budget: int | None = None) -> RunConfig:
    """The run config of one trial (see the module doc), resolved as `levelray train --config` resolves one; with
    budgets, trained to `budget` (default: the last)."""
    data = merge_config(spec.base, spec.arms[arm])
    sweep = {"run_dir": str(run_dir), "seed": seed, "backend": "inline", "address": None, "metrics_port": 0}
    if spec.wandb is not None:  # the sweep's W&B settings, its group, and the trial's arm and seed as tags
        sweep.update({f"wandb.{key}": value for key, value in spec.wandb.items()})
        sweep.update({"wandb.enabled": True, "wandb.group": spec.wandb.get("group") or spec.name,
                      "wandb.tags": [*(spec.wandb.get("tags") or ()), arm, f"seed{seed}"]})
    if spec.budgets:
        sweep[spec.budget_key] = budget or spec.budgets[-1]
    cfg = replace_paths(from_dict(data), sweep)
    return apply_preset(cfg, dict_paths(data) | set(sweep))


def _check_configs(spec: SweepSpec) -> None:
    """Build and check every arm's config (with the first seed, at every budget) and plan its evaluations;
    ConfigError names the place in the spec."""
    from levelray.deploy.evaluation.level_sets import plan_level_sets

    try:
        from_dict(spec.base, RunConfig, "base.")
    except ConfigError as exc:
        raise ConfigError(f"sweep spec: {exc}") from None
    for arm, keys in spec.arms.items():
        try:
            from_dict(keys, RunConfig, f"arms.{arm}.")
        except ConfigError as exc:
            raise ConfigError(f"sweep spec: {exc}") from None
        try:
            for budget in spec.budgets or (None,):
                validate(trial_config(spec, arm, spec.seeds[0], "trial", budget))
        except ConfigError as exc:
            raise ConfigError(f"sweep spec: arm {arm}: {exc}") from None
        cfg = trial_config(spec, arm, spec.seeds[0], "trial")
        if spec.budget_unit == "trained_steps" and cfg.total_steps <= spec.budgets[-1]:
            raise ConfigError(f"sweep spec: arm {arm}: total_steps {cfg.total_steps:,} caps the env steps of a "
                              f"trial trained to budgets in trained steps, so it must exceed the last budget "
                              f"({spec.budgets[-1]:,}); a curriculum that replays a share p of its steps needs "
                              f"about budget / p")
        for i, e in enumerate(spec.evaluations):
            try:
                plan_level_sets(cfg, list(e.levels), e.episodes, spec.seeds[0])
            except ConfigError as exc:
                where = "evaluate" if len(spec.evaluations) == 1 else f"evaluate[{i}]"
                raise ConfigError(f"sweep spec: arm {arm}: {where}: {exc}") from None


def spec_yaml(spec: SweepSpec) -> str:
    """The text of DIR/sweep.yaml: the spec a resumed sweep reads back."""
    return yaml.safe_dump(spec.to_dict(), sort_keys=False)


"""The `levelray` command line: train, scale, status, evaluate, report, sweep.

Every config leaf has a flag (see `contracts.config`); `--config run.yaml` fills the tree first and
flags override it. `levelray train --help` lists them all.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from pathlib import Path

import yaml

from levelray.contracts.config import (
    ConfigError,
    RunConfig,
    flag_name,
    from_dict,
    get_path,
    leaves,
    replace_path,
    replace_paths,
)
from levelray.deploy.errors import JobFailed
from levelray.deploy.training.progress import end_line, say
from levelray.policy.threads import quiet_waits, use_threads


def value_text(value) -> str:
    """A config value as the command line writes it (lists comma-separated, None as none)."""
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value)) or "none"
    return "none" if value is None else str(value)


def _add_config_flags(parser: argparse.ArgumentParser) -> dict[str, str]:
    """One flag per config leaf; returns {argparse dest: dotted path}. A flag that is not given leaves no
    attribute (SUPPRESS), so YAML values are only overridden by flags the user typed; the help shows the
    default the config tree really has."""
    defaults = RunConfig()
    dests = {}
    for path, f, tp in leaves():
        name = flag_name(path, f)
        dest = "cfg__" + path.replace(".", "__")
        meta = f.metadata
        help_text = meta.get("help", "")
        if "choices" in meta:
            help_text += f" ({'|'.join(map(str, meta['choices']))})"
        help_text += f" (default: {value_text(get_path(defaults, path))})".replace("%", "%%")
        # a yes/no leaf may be given bare (`--level-robust`) or with a value (`--level-robust false`)
        switch = {"nargs": "?", "const": "true"} if tp is bool else {}
        parser.add_argument(name, dest=dest, default=argparse.SUPPRESS, metavar=path.split(".")[-1].upper(),
                            help=help_text, **switch)
        dests[dest] = path
    return dests


def build_config(args: argparse.Namespace, dests: dict[str, str], base: dict | None = None) -> RunConfig:
    data = base
    if getattr(args, "config", None):
        try:
            data = yaml.safe_load(Path(args.config).read_text())
        except OSError as exc:
            raise ConfigError(f"--config: cannot read {args.config}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"--config: {args.config} is not valid YAML: {exc}") from None
        if data is not None and not isinstance(data, dict):
            raise ConfigError(f"--config: {args.config} must hold a mapping of config sections")
    flags = {path: getattr(args, dest) for dest, path in dests.items() if hasattr(args, dest)}
    cfg = replace_paths(from_dict(data), flags)
    if base is None:  # a new run; a resumed one has its resolved config already
        from levelray.contracts.presets import apply_preset, dict_paths

        cfg = apply_preset(cfg, dict_paths(data) | set(flags))
    return cfg


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, str]]:
    """(the `levelray` parser with every command, {argparse dest of a `train` config flag: its dotted config path}).

    Public so that what reads `levelray train` flags outside the command line (the comparison benchmarks turn
    them into a sweep spec's config) parses them with this parser's flags, defaults and choices, not a copy."""
    parser = argparse.ArgumentParser(prog="levelray", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train an agent")
    train.add_argument("--config", help="YAML file with the config tree (flags override it)")
    train.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its latest checkpoint")
    train.add_argument("--overwrite", action="store_true",
                       help="delete an earlier run in --run-dir and start a new one there (without it, a run "
                            "directory that holds a run is refused unless --resume)")
    train.add_argument("--quiet", action="store_true", help="no progress line")
    dests = _add_config_flags(train)

    scale = sub.add_parser("scale", help="change the running job's number of actors")
    scale.add_argument("--num-actors", type=int, required=True, help="the actor count to scale to (up or down)")
    scale.add_argument("--address", default="auto", help="the job's Ray cluster: auto or HOST:PORT")

    status = sub.add_parser("status", help="show the running job")
    status.add_argument("--address", default="auto", help="the job's Ray cluster: auto or HOST:PORT")
    status.add_argument("--json", action="store_true", help="machine-readable output")

    from levelray.deploy.evaluation.evaluate import add_evaluate_arguments
    from levelray.deploy.report.command import add_report_arguments

    add_evaluate_arguments(sub.add_parser("evaluate", help="returns on training and held-out levels"))
    add_report_arguments(sub.add_parser("report", help="an HTML page of runs (index.html: figures, configs, videos), "
                                                       "or of a sweep's arms side by side"))
    from levelray.deploy.sweep.command import add_sweep_arguments

    add_sweep_arguments(sub.add_parser("sweep", help="arms x seeds of runs on Ray Tune, compared in one table"))
    return parser, dests


def wandb_extras(cfg: RunConfig):
    """What `--wandb` adds to a run's W&B run beyond its records: the level galleries at its end (the report's,
    `deploy.report.wandb_images`); None without `--wandb`."""
    if not cfg.wandb.enabled:
        return None
    from levelray.deploy.report.wandb_images import level_galleries
    from levelray.deploy.training.driver import WandbExtras

    return WandbExtras(images=level_galleries)


def cmd_train(args: argparse.Namespace, dests: dict[str, str]) -> int:
    base = None
    if args.resume:
        cfg_path = Path(args.resume) / "config.yaml"
        if not cfg_path.exists():
            raise ConfigError(f"--resume: {args.resume} is not a run directory (no config.yaml)")
        try:
            base = yaml.safe_load(cfg_path.read_text())
        except yaml.YAMLError as exc:
            raise ConfigError(f"--resume: {cfg_path} is not valid YAML: {exc}") from None
    saved = replace_path(from_dict(base), "run_dir", str(args.resume)) if args.resume else None
    cfg = build_config(args, dests, base)
    if args.resume:
        cfg = replace_path(cfg, "run_dir", str(args.resume))
    from levelray.deploy.training.driver import prepare_run_dir, train

    run_dir = prepare_run_dir(cfg, resume=bool(args.resume), overwrite=args.overwrite, saved=saved)
    print(f"levelray: run directory {run_dir.path}", flush=True)

    stop = threading.Event()

    def on_sigint(_signum, _frame):
        if stop.is_set():
            raise KeyboardInterrupt
        end_line(sys.stderr)
        print("levelray: stopping (final checkpoint); Ctrl-C again to abort", file=sys.stderr, flush=True)
        stop.set()

    signal.signal(signal.SIGINT, on_sigint)
    signal.signal(signal.SIGTERM, on_sigint)
    record = train(cfg, run_dir, resume=bool(args.resume), stop=stop, quiet=args.quiet, wandb=wandb_extras(cfg))
    say("levelray: done " + json.dumps({k: record.get(k) for k in ("env_steps", "episode_return_mean",
                                                                    "learner_version")}))
    return 0


def _end_progress_line(_record: logging.LogRecord) -> bool:
    """A log message starts on its own line, not after an in-place progress line (a logging filter)."""
    end_line(sys.stderr)
    return True


def main(argv: list[str] | None = None) -> int:
    quiet_waits()  # before anything imports torch (and with it OpenMP, which reads the variable once)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.addFilter(_end_progress_line)
    parser, dests = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "train":
            return cmd_train(args, dests)
        if args.command == "evaluate":
            from levelray.deploy.evaluation.evaluate import cmd_evaluate

            use_threads()
            return cmd_evaluate(args)
        if args.command == "report":
            from levelray.deploy.sweep.report import cmd_report

            use_threads()
            return cmd_report(args)
        if args.command == "sweep":
            from levelray.deploy.sweep.command import cmd_sweep

            return cmd_sweep(args)
        from levelray.deploy.cluster import control

        if args.command == "scale":
            return control.cmd_scale(args)
        if args.command == "status":
            return control.cmd_status(args)
    except ConfigError as exc:
        parser.exit(2, f"levelray: error: {exc}\n")
    except JobFailed as exc:  # the job ran and could not go on: its final checkpoint is written
        print(f"levelray: error: {exc}", file=sys.stderr, flush=True)
        return 1
    return 2


if __name__ == "__main__":
    sys.exit(main())

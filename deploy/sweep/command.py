"""`levelray sweep SPEC.yaml [--dir DIR] [--address auto] [--max-concurrent N]` and `levelray sweep --resume DIR`.

The spec is read and checked whole (`deploy.sweep.spec`), and the directory claimed, before Ray starts; the sweep
then runs on Ray Tune (`deploy.sweep.runner`) on the embedded local Ray or the cluster at `--address`, and ends
with the tables of `DIR/results.json`. Exit status: 0 when every trial finished, 1 when some failed or did not
finish (each is named with its error), 2 for a spec or directory refused before anything started.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

from levelray.contracts.config import ConfigError
from levelray.deploy.sweep.spec import SweepSpec, load_spec, spec_yaml

SPEC_FILE = "sweep.yaml"


def add_sweep_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", nargs="?", metavar="SPEC.yaml",
                   help="the sweep: base config, arms, baseline, seeds, evaluate (docs/guides/experiments.md)")
    p.add_argument("--resume", metavar="DIR", default=None,
                   help="continue the sweep in DIR: finished trials are kept, the others continue from their "
                        "checkpoints")
    p.add_argument("--dir", default=None, help="the sweep's directory (default sweeps/<spec name>-<time>)")
    p.add_argument("--address", default=None,
                   help="Ray cluster to run the trials on: auto or HOST:PORT (default: an embedded local Ray)")
    p.add_argument("--max-concurrent", type=int, default=None, metavar="N",
                   help="trials running at once (default: as many as the cluster's free resources hold)")


def _claim(spec_path: str, directory: str | None) -> tuple[SweepSpec, Path]:
    spec = load_spec(spec_path)
    sweep_dir = Path(directory) if directory else Path("sweeps") / f"{spec.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    if (sweep_dir / SPEC_FILE).exists():
        raise ConfigError(f"--dir: {sweep_dir} holds a sweep already; continue it with --resume {sweep_dir}, or "
                          f"choose another --dir")
    if sweep_dir.exists() and not sweep_dir.is_dir():
        raise ConfigError(f"--dir: {sweep_dir} is a file, not a directory")
    if spec.wandb is not None and not spec.wandb.get("group"):  # the W&B group of this sweep's runs, kept in
        # sweep.yaml: a resumed sweep logs into the same group, and two sweeps of one spec into two groups
        spec = dataclasses.replace(spec, wandb={**spec.wandb, "group": sweep_dir.resolve().name})
    sweep_dir.mkdir(parents=True, exist_ok=True)
    (sweep_dir / SPEC_FILE).write_text(spec_yaml(spec))
    return spec, sweep_dir


def _reopen(directory: str) -> tuple[SweepSpec, Path]:
    sweep_dir = Path(directory)
    if not (sweep_dir / SPEC_FILE).exists():
        raise ConfigError(f"--resume: {sweep_dir} is not a sweep directory (no {SPEC_FILE})")
    return load_spec(sweep_dir / SPEC_FILE), sweep_dir


def cmd_sweep(args: argparse.Namespace) -> int:
    if (args.spec is None) == (args.resume is None):
        raise ConfigError("sweep: give SPEC.yaml (a new sweep) or --resume DIR (continue one), not both")
    if args.resume and (args.dir or args.max_concurrent is not None):
        raise ConfigError("--resume: the sweep keeps its directory and --max-concurrent; give only --resume DIR "
                          "(and --address)")
    if args.max_concurrent is not None and args.max_concurrent < 1:
        raise ConfigError(f"--max-concurrent: must be >= 1, got {args.max_concurrent}")
    spec, sweep_dir = _reopen(args.resume) if args.resume else _claim(args.spec, args.dir)
    print(f"levelray sweep: {sweep_dir} ({len(spec.arms)} arms x {len(spec.seeds)} seeds)", flush=True)

    from levelray.deploy.cluster.ray_cluster import init_ray
    from levelray.deploy.sweep.runner import print_results, run_sweep

    init_ray(args.address, 0)
    results = run_sweep(spec, sweep_dir, resume=bool(args.resume), max_concurrent=args.max_concurrent)
    print_results(results, sweep_dir.resolve())
    return 0 if results["complete"] else 1

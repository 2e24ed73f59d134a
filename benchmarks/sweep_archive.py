"""Carry a long sweep from one machine to the next through the repository: `save` copies what a sweep's trials have
done into a folder that is committed, `restore` lays that folder out again as a sweep directory which `levelray
sweep SPEC --dir DIR` continues.

    python -m benchmarks.sweep_archive save SWEEP_DIR ARCHIVE_DIR [--require evaluate-mirror.json]
    python -m benchmarks.sweep_archive restore ARCHIVE_DIR SWEEP_DIR
    levelray sweep SPEC.yaml --dir SWEEP_DIR --max-concurrent 2

A session's machine, and every file outside the repository with it, is gone when the session ends, while a
comparison of many seeds takes several sessions. The archive holds the sweep's checked spec (`sweep.yaml`, for the
analyses, which read an archive as they read a sweep directory) and, of each trial (`trials/<arm>-seed<seed>/`):

- every file at the top of its run directory: config.yaml, run.json, metrics.jsonl, trial.jsonl and each
  evaluation's JSON, which are the numbers every analysis reads;
- of a finished trial (its trial.jsonl records `done` or `failed`): each kept checkpoint's `meta.json` and
  `levels.msgpack` (the level buffer: galleries, buffer statistics), without the weights (`learner.pt`, ~5.6 MB at
  LSTM-256, with the optimizer's state). `--require FILE` refuses to drop them from a finished trial that lacks FILE,
  the cache of an analysis that needs the weights (dcd_maze's mirrored suite, `evaluate-mirror.json`);
- of an unfinished trial: its newest checkpoint whole, which is where the restored trial continues (a valid run, not
  bit-identical to one never stopped, as any resumed run).

A fresh sweep over a restored directory reports each finished trial's recorded outcome without training it again
(deploy/sweep/trial.py) and continues the others from their checkpoints; Tune's own state is not kept, since a
trial's state is its run directory. Each trial's folder in the archive is replaced whole, so a `save` stopped midway
leaves every trial as one save or the other wrote it.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from levelray.deploy.rundir import RunDir
from levelray.deploy.sweep.trial import TrialLog

TRIALS = "trials"
SPEC = "sweep.yaml"  # the checked spec a sweep keeps; saved, never restored (a fresh sweep writes its own)
WEIGHTLESS = ("meta.json", "levels.msgpack")  # what a finished trial's checkpoints keep


class ArchiveError(ValueError):
    """An archive or sweep directory that cannot be saved or restored as asked; nothing was written."""


def trial_dirs(sweep_dir: Path) -> list[Path]:
    """The sweep's trial run directories, by name."""
    folder = sweep_dir / TRIALS
    if not folder.is_dir():
        raise ArchiveError(f"{sweep_dir} is not a sweep directory: it has no {TRIALS}/ folder")
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


def _copy_trial(trial: Path, dest: Path) -> dict[str, object]:
    """Copy what is kept of `trial` into the new folder `dest`; what was kept, for the summary line."""
    dest.mkdir(parents=True)
    for f in trial.iterdir():
        if f.is_file():
            shutil.copy2(f, dest / f.name)
    finished = TrialLog(trial).outcome() is not None
    checkpoints = RunDir(trial).list_checkpoints()
    kept = checkpoints if finished else checkpoints[-1:]
    for ckpt in kept:
        (dest / "checkpoints" / ckpt.name).mkdir(parents=True)
        for f in ckpt.iterdir():
            if f.is_file() and (not finished or f.name in WEIGHTLESS):
                shutil.copy2(f, dest / "checkpoints" / ckpt.name / f.name)
    return {"finished": finished, "checkpoints": [c.name for c in kept]}


def save(sweep_dir: Path, archive: Path, require: list[str]) -> list[dict[str, object]]:
    """Copy every trial of `sweep_dir` into `archive/trials/`, each replacing its earlier copy. Raises ArchiveError,
    before writing anything, when a finished trial lacks a `require`d file."""
    trials = trial_dirs(sweep_dir)
    missing = [f"{t.name}/{name}" for t in trials if TrialLog(t).outcome() is not None
               for name in require if not (t / name).is_file()]
    if missing:
        raise ArchiveError(f"--require: finished trials lack {', '.join(missing)}; make them (the analysis that "
                           f"needs the weights) before saving, as the archive keeps no weights of a finished trial")
    archive.mkdir(parents=True, exist_ok=True)
    if (sweep_dir / SPEC).is_file():  # the record the analyses read (`dcd_maze --analyse --out-dir ARCHIVE`)
        shutil.copy2(sweep_dir / SPEC, archive / SPEC)
    summary = []
    for trial in trials:
        final = archive / TRIALS / trial.name
        staging = archive / TRIALS / f".saving-{trial.name}"
        shutil.rmtree(staging, ignore_errors=True)
        kept = _copy_trial(trial, staging)
        shutil.rmtree(final, ignore_errors=True)
        staging.rename(final)
        summary.append({"trial": trial.name, **kept})
    return summary


def restore(archive: Path, sweep_dir: Path) -> list[str]:
    """Lay out `archive`'s trials as `sweep_dir/trials/` for a fresh `levelray sweep --dir sweep_dir`. Raises
    ArchiveError when `sweep_dir` already holds trials (nothing of it is overwritten)."""
    trials = trial_dirs(archive)
    if (sweep_dir / TRIALS).exists() or (sweep_dir / SPEC).exists():
        raise ArchiveError(f"{sweep_dir} holds a sweep already; restore into a new directory")
    for trial in trials:
        shutil.copytree(trial, sweep_dir / TRIALS / trial.name)
    return [t.name for t in trials]


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.sweep_archive", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("save", help="copy a sweep directory's trials into an archive folder")
    s.add_argument("sweep_dir", type=Path)
    s.add_argument("archive", type=Path)
    s.add_argument("--require", action="append", default=[], metavar="FILE",
                   help="a file every finished trial must hold before its weights are left out (repeatable)")
    r = sub.add_parser("restore", help="lay an archive out as a new sweep directory")
    r.add_argument("archive", type=Path)
    r.add_argument("sweep_dir", type=Path)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        if args.command == "save":
            for t in save(args.sweep_dir, args.archive, args.require):
                state = "finished" if t["finished"] else ("continues from " + t["checkpoints"][0] if t["checkpoints"]
                                                          else "not checkpointed yet: starts over")
                print(f"{t['trial']}: {state}")
        else:
            names = restore(args.archive, args.sweep_dir)
            print(f"{len(names)} trials in {args.sweep_dir / TRIALS}; continue with "
                  f"`levelray sweep SPEC.yaml --dir {args.sweep_dir}`")
    except ArchiveError as exc:
        print(f"sweep_archive: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The run directory: resolved config, `metrics.jsonl`, and checkpoints.

    RUN_DIR/config.yaml                 the resolved config tree
    RUN_DIR/metrics.jsonl               one JSON object per report
    RUN_DIR/checkpoints/ckpt-<version>/ learner.pt, levels.msgpack, replay.msgpack, meta.json
    RUN_DIR/run.json                    the run's id, in every checkpoint's meta.json too (and its W&B run's)
    RUN_DIR/wandb/                      with --wandb: W&B's files (`deploy.monitoring.wandb_run`)

`resolve_checkpoint` turns what a user names (a run directory or one of its checkpoints) into a loaded
checkpoint and its config, for `levelray evaluate`.

A directory that holds an earlier run is only continued (`--resume`) or cleared (`--overwrite`), never
silently mixed with a new run: `RunDir.start` refuses it otherwise. Checkpoints are pruned by the order they
were written, never the one just written.

A checkpoint is written into a hidden temporary directory, fsynced, then renamed into place, so a
crash leaves either the whole checkpoint or none; `meta.json` (written last) lists each file's size
and SHA-256, so a damaged checkpoint is detected on load and the previous one is used.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from levelray.contracts import snapshot
from levelray.contracts.config import ConfigError, RunConfig, from_dict, to_dict

CHECKPOINT_PREFIX = "ckpt-"
RUN_FILES = ("config.yaml", "metrics.jsonl", "run.json", "checkpoints", "services", "wandb")  # what a run leaves


class RunDirInUse(ValueError):
    """The run directory holds an earlier run and neither resume nor overwrite was asked for."""


def default_run_dir() -> Path:
    return Path("runs") / time.strftime("%Y%m%d-%H%M%S")


class RunDir:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path).resolve()  # services on other processes get absolute paths
        self.path.mkdir(parents=True, exist_ok=True)
        self.checkpoints = self.path / "checkpoints"
        self._metrics = None
        self._run_id: str | None = None

    @classmethod
    def start(cls, path: str | os.PathLike, *, resume: bool = False, overwrite: bool = False) -> RunDir:
        """The run directory of a run that starts now. A directory holding an earlier run is refused unless
        `resume` (continue it, same run id) or `overwrite` (delete that run's files first)."""
        path = Path(path)
        earlier = sorted(name for name in RUN_FILES if (path / name).exists())
        if earlier and not resume:
            if not overwrite:
                raise RunDirInUse(
                    f"--run-dir: {path} holds an earlier run ({', '.join(earlier)}); continue it with "
                    f"--resume {path}, delete it with --overwrite, or choose another --run-dir"
                )
            for name in earlier:
                target = path / name
                shutil.rmtree(target) if target.is_dir() else target.unlink()
        run_dir = cls(path)
        if not resume or not (run_dir.path / "run.json").exists():
            info = {"run_id": uuid.uuid4().hex, "created": time.time()}
            snapshot.atomic_write_bytes(run_dir.path / "run.json", json.dumps(info).encode())
        return run_dir

    @property
    def run_id(self) -> str | None:
        """The id of the run this directory holds (None for a directory written before run ids)."""
        if self._run_id is None and (self.path / "run.json").exists():
            self._run_id = json.loads((self.path / "run.json").read_text())["run_id"]
        return self._run_id

    def write_config(self, cfg: RunConfig) -> None:
        text = yaml.safe_dump(to_dict(cfg), sort_keys=False)
        snapshot.atomic_write_bytes(self.path / "config.yaml", text.encode())

    def append_metrics(self, record: dict[str, Any]) -> None:
        if self._metrics is None:
            self._metrics = open(self.path / "metrics.jsonl", "a", buffering=1)  # noqa: SIM115
        self._metrics.write(json.dumps(_finite(record), allow_nan=False, default=float) + "\n")

    def last_metrics_record(self) -> dict[str, Any] | None:
        """The last complete record of `metrics.jsonl` (None if there is none). A process killed while
        writing leaves a partial last line: it is skipped."""
        path = self.path / "metrics.jsonl"
        if not path.exists():
            return None
        window = 1 << 16  # records are a few kB (more with many levels): widen the tail until one parses
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            while True:
                f.seek(max(0, size - window))
                lines = f.read().splitlines()
                if size > window:
                    lines = lines[1:]  # the first line of a tail may be cut
                for line in reversed(lines):
                    try:
                        record = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(record, dict):
                        return record
                if window >= size:
                    return None
                window *= 4

    def close(self) -> None:
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None

    # -- checkpoints -------------------------------------------------------------------------
    def save_checkpoint(
        self,
        version: int,
        learner_state: dict[str, Any],
        counters: dict[str, Any],
        *,
        level_state: dict | None = None,
        replay_state: dict | None = None,
        config: RunConfig | None = None,
        keep: int = 3,
    ) -> Path:
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        final = self.checkpoints / f"{CHECKPOINT_PREFIX}{version:010d}"
        tmp = self.checkpoints / f".tmp-{final.name}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        files = {"learner.pt": None}
        with open(tmp / "learner.pt", "wb") as f:  # fsynced like every other file of a checkpoint
            torch.save(learner_state, f)
            f.flush()
            os.fsync(f.fileno())
        if level_state is not None:
            snapshot.save(tmp / "levels.msgpack", level_state)
            files["levels.msgpack"] = None
        if replay_state is not None:
            snapshot.save(tmp / "replay.msgpack", replay_state)
            files["replay.msgpack"] = None
        meta = {
            "version": version,
            "run_id": self.run_id,
            "time": time.time(),
            "written": time.time_ns(),  # write order, for pruning
            "counters": counters,
            "config": to_dict(config) if config is not None else None,
            "files": {name: _digest(tmp / name) for name in files},
        }
        meta["meta_sha256"] = _meta_digest(meta)
        snapshot.atomic_write_bytes(tmp / "meta.json", json.dumps(meta).encode())
        snapshot.fsync_dir(tmp)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        snapshot.fsync_dir(self.checkpoints)
        for old in self._by_write_order()[:-keep]:
            if old != final:
                shutil.rmtree(old, ignore_errors=True)
        return final

    def _by_write_order(self) -> list[Path]:
        def written(path: Path) -> int:
            try:
                return int(json.loads((path / "meta.json").read_text()).get("written", 0))
            except (OSError, ValueError):
                return 0  # unreadable: oldest, pruned first

        return sorted(self.list_checkpoints(), key=written)

    def list_checkpoints(self) -> list[Path]:
        if not self.checkpoints.exists():
            return []
        return sorted(p for p in self.checkpoints.iterdir() if p.name.startswith(CHECKPOINT_PREFIX) and p.is_dir())

    def load_latest_checkpoint(self, device: str = "cpu") -> dict[str, Any] | None:
        """The newest checkpoint that verifies; damaged ones are skipped with a warning."""
        errors = []
        for path in reversed(self.list_checkpoints()):
            try:
                return load_checkpoint(path, device)
            except (OSError, ValueError, RuntimeError, KeyError) as exc:
                errors.append(f"{path.name}: {exc}")
        if errors:
            raise ValueError("no usable checkpoint in " + str(self.checkpoints) + ": " + "; ".join(errors))
        return None


def _finite(value: Any) -> Any:
    """`value` with every NaN/Inf float replaced by None (JSON null): JSON has no NaN, and a diverging
    loss must be recorded, not crash the writer."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, np.ndarray | np.generic):
        return _finite(value.tolist())
    return value


def load_checkpoint(path: Path, device: str = "cpu") -> dict[str, Any]:
    meta_path = path / "meta.json"
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"checkpoint {path.name} has no readable meta.json ({exc})") from exc
    if not isinstance(meta, dict):
        raise ValueError(f"checkpoint {path.name}: meta.json is not a JSON object")
    # A damaged byte can leave valid JSON (a key renamed, a digit changed): meta.json checks itself. Checkpoints
    # written before the digest existed have none and are read as they are.
    if "meta_sha256" in meta and meta["meta_sha256"] != _meta_digest(meta):
        raise ValueError(f"checkpoint {path.name}: meta.json is damaged (its sha256 does not match)")
    for name, expected in meta.get("files", {}).items():
        actual = _digest(path / name)
        if actual != expected:
            raise ValueError(f"checkpoint file {name} is damaged (size/sha256 {actual} != {expected})")
    out = dict(meta)
    out["path"] = str(path)
    out["learner"] = torch.load(path / "learner.pt", map_location=device, weights_only=True)
    out["levels"] = snapshot.load(path / "levels.msgpack") if (path / "levels.msgpack").exists() else None
    out["replay"] = snapshot.load(path / "replay.msgpack") if (path / "replay.msgpack").exists() else None
    return out


def resolve_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Load CHECKPOINT: a checkpoint directory (`RUN_DIR/checkpoints/ckpt-...`) or a run directory (its
    latest valid checkpoint). Adds `cfg` (RunConfig: the checkpoint's config, else RUN_DIR/config.yaml).
    Raises ConfigError with a clear message for anything else."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"CHECKPOINT: {p} does not exist (give a run directory or RUN_DIR/checkpoints/ckpt-...)")
    if not p.is_dir():
        raise ConfigError(f"CHECKPOINT: {p} is not a directory (give a run directory or a checkpoint directory)")
    if (p / "meta.json").exists() or (p / "learner.pt").exists():
        try:
            ckpt = load_checkpoint(p)
        except (OSError, ValueError, RuntimeError, KeyError) as exc:
            raise ConfigError(f"CHECKPOINT: {p} is not a usable checkpoint: {exc}") from None
        run_path = p.parent.parent
    elif (p / "checkpoints").is_dir() or (p / "config.yaml").exists():
        try:
            ckpt = RunDir(p).load_latest_checkpoint()
        except ValueError as exc:
            raise ConfigError(f"CHECKPOINT: {exc}") from None
        if ckpt is None:
            raise ConfigError(f"CHECKPOINT: run directory {p} has no checkpoint in {p / 'checkpoints'}")
        run_path = p
    else:
        raise ConfigError(
            f"CHECKPOINT: {p} is neither a checkpoint directory (with meta.json) nor a run directory "
            "(with config.yaml and checkpoints/)"
        )
    cfg_data = ckpt.get("config")
    if cfg_data is None and (run_path / "config.yaml").exists():
        cfg_data = yaml.safe_load((run_path / "config.yaml").read_text())
    if cfg_data is None:
        raise ConfigError(f"CHECKPOINT: {ckpt['path']} has no config and no config.yaml beside it")
    ckpt["cfg"] = from_dict(cfg_data)
    return ckpt


def checkpoint_weights(ckpt: dict[str, Any]) -> dict[str, np.ndarray]:
    """The policy's weights in a loaded checkpoint, as the NumPy arrays actors and evaluation take."""
    return {k: v.detach().cpu().numpy() for k, v in ckpt["learner"]["model"].items()}


def _meta_digest(meta: dict[str, Any]) -> str:
    """sha256 of meta.json's content without its own digest, keys sorted (JSON floats round-trip exactly)."""
    body = {k: v for k, v in meta.items() if k != "meta_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _digest(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {"size": None, "sha256": None}
    with open(path, "rb") as f:
        sha256 = hashlib.file_digest(f, "sha256").hexdigest()
    return {"size": path.stat().st_size, "sha256": sha256}

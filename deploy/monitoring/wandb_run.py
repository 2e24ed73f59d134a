"""Weights & Biases: a run's config, its metrics records, held-out results, videos and images as one W&B run.

What lands where (docs/guides/monitoring.md, "Weights & Biases"):

- config: the resolved config tree (`config.yaml`'s), plus `levelray` (the run directory and its id) and what the
  caller adds (a sweep trial's `sweep`, `arm`, `seed`);
- history: each `metrics.jsonl` record under the same keys (nested ones as `replay/size`, as in TensorBoard),
  plotted against `env_steps` (`define_metric`); `samples_trained` is in every row, to plot against the trained
  steps instead; lists of numbers (`level_weights`, `level_staleness`) and the replay priority histogram become
  W&B histograms; a held-out evaluation's video (`test_video`) a W&B video; when the run ends, the images the
  caller draws (`level_gallery`: the level galleries) in a row of their own;
- summary: the last record's values, `final_checkpoint` (its path), and what the caller adds (a sweep trial's
  evaluation metrics).

The W&B run's id is the run directory's own (`run.json`, `RunDir.run_id`): a resumed run (`--resume`, or a
sweep trial trained to its next budget) continues the same W&B run, an `--overwrite` starts a new one. W&B's
files go under the run directory (`RUN_DIR/wandb/`, its data and cache folders too while the run logs:
`point_local_dirs`), never the working directory. Mode `online` without
credentials (`WANDB_API_KEY`, `WANDB_IDENTITY_TOKEN_FILE`, or a `wandb login` in ~/.netrc) runs offline and says
so once; an offline run is uploaded later with `wandb sync RUN_DIR/wandb/offline-run-*`.

W&B is an extra, like the videos: a W&B run that cannot start, or a record it cannot take, is logged as a warning
and the training goes on without it (`metrics.jsonl` has everything). wandb's own console output is silenced
(levelray says where the run is) and the console is not captured (the progress line rewrites itself in place).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from levelray.contracts.config import ConfigError, RunConfig, WandbConfig, to_dict
from levelray.deploy.errors import error_summary
from levelray.deploy.monitoring.tensorboard import scalars

log = logging.getLogger(__name__)

EXTRA = "pip install 'levelray[wandb]'"
STEP = "env_steps"  # the x axis of every metric (what comparisons between methods hold fixed)
SKIPPED = frozenset({"time"})  # W&B stamps each row itself (`_timestamp`); a wall clock is no metric to plot
HISTOGRAMS = ("level_weights", "level_staleness")  # lists of numbers in a record, one per level
# wandb's folders outside a run's own (read from the environment when used): the staging area of the files a run
# logs as artifacts (tables), which `wandb sync` of an offline run reads, and the cache (its service's log)
LOCAL_DIRS = {"WANDB_DATA_DIR": "data", "WANDB_CACHE_DIR": "cache"}


def point_local_dirs(wandb_dir: Path) -> dict[str, str | None]:
    """Point wandb's data and cache folders (`LOCAL_DIRS`) into `wandb_dir` where the user has not set them, so
    that everything a run writes stays in its directory (and travels with it to where it is synced); returns the
    values to restore (`restore_environment`)."""
    previous = {name: os.environ.get(name) for name in LOCAL_DIRS}
    for name, sub in LOCAL_DIRS.items():
        os.environ.setdefault(name, str(wandb_dir / sub))
    return previous


def restore_environment(previous: dict[str, str | None]) -> None:
    for name, value in previous.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def require_wandb(where: str = "--wandb") -> None:
    """ConfigError naming the extra when the wandb package is not installed (before a run starts)."""
    try:
        import wandb  # noqa: F401
    except ImportError:
        raise ConfigError(f"{where} needs the wandb package, an optional extra of levelray: {EXTRA}") from None


def has_credentials() -> bool:
    """Whether wandb would find credentials for its server: WANDB_API_KEY or WANDB_IDENTITY_TOKEN_FILE, or the
    server's entry in ~/.netrc (what `wandb login` writes), read with wandb's own reader."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    try:
        from wandb.sdk.lib import urls
        from wandb.sdk.lib.wbauth import wbnetrc

        return wbnetrc.read_netrc_auth(host=os.environ.get("WANDB_BASE_URL") or urls.DEFAULT_BASE_URL) is not None
    except Exception:  # noqa: BLE001 - an unreadable or malformed netrc: no usable credentials
        return False


NO_CREDENTIALS = "offline: no W&B credentials (WANDB_API_KEY or `wandb login`)"


def resolve_mode(mode: str) -> tuple[str, str | None]:
    """(the mode W&B runs in, why it is not the one asked for, or None): `online` without credentials runs
    `offline`."""
    if mode == "online" and not has_credentials():
        return "offline", NO_CREDENTIALS
    return mode, None


def where_line(run_id: str, mode: str, why: str | None, wandb_dir: Path, url: str | None) -> str:
    """The one line that says where a W&B run logs (and why offline where it fell back)."""
    if mode == "online":
        return f"levelray: W&B run {url or run_id}"
    if mode == "disabled":
        return "levelray: W&B disabled (wandb.mode): nothing is logged to it"
    return (f"levelray: W&B run {run_id}, {why or 'offline'}; in {wandb_dir}; upload it with: wandb sync "
            f"{wandb_dir}/offline-run-*")


def histogram(value: Any):
    """A `wandb.Histogram` of a list of finite numbers, or of a `{edges, counts}` histogram; None otherwise."""
    import wandb

    if isinstance(value, dict) and value.get("edges") and value.get("counts") is not None:
        counts, edges = value["counts"], value["edges"]
        if len(edges) == len(counts) + 1 and sum(counts) > 0:
            return wandb.Histogram(np_histogram=(counts, edges))
        return None
    if isinstance(value, list) and value and all(isinstance(v, int | float) and not isinstance(v, bool)
                                                 and math.isfinite(v) for v in value):
        return wandb.Histogram(value)
    return None


def history_row(record: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """The W&B history row of a `metrics.jsonl` record: its finite numbers under their flattened names, its
    level vectors and replay priority histogram as histograms, its held-out video (a path in the run directory)
    as a video."""
    import wandb

    row: dict[str, Any] = {k: v for k, v in scalars(record).items() if k not in SKIPPED}
    for key in (*HISTOGRAMS, "replay_priority_hist"):
        hist = histogram(record.get(key))
        if hist is not None:
            row[key] = hist
    video = record.get("test_video")
    if isinstance(video, str) and (run_dir / video).is_file():
        row["test_video"] = wandb.Video(str(run_dir / video), format="mp4",
                                        caption=f"version {record.get('test_version')}: {Path(video).name}")
    return row


class WandbRun:
    """One W&B run for a levelray run directory (see the module doc). `start` returns None where W&B could not
    start (warned); every method after that is safe to call, and a failure turns the logging off with a warning."""

    def __init__(self, run, run_dir: Path, environment: dict[str, str | None]):
        self.run, self.run_dir = run, run_dir
        self.environment = environment  # what `point_local_dirs` changed, restored when the run ends

    @classmethod
    def start(cls, section: WandbConfig, run_dir: Path, run_id: str, *, config: dict[str, Any], name: str | None = None,
              tags: Sequence[str] = (), job_type: str = "train", say=print) -> WandbRun | None:
        """Start (or continue: the same `run_id`) the W&B run of `run_dir`, W&B's files in `run_dir/wandb/`;
        `say` prints the one line that says where it logs (and why offline, where it fell back). A `train` run
        plots every metric against env steps; another job (a sweep's results) logs no such series."""
        import wandb

        mode, why = resolve_mode(section.mode)
        run_dir = Path(run_dir)
        environment = point_local_dirs(run_dir / "wandb")
        try:
            run = wandb.init(
                project=section.project, entity=section.entity, group=section.group,
                tags=[*(section.tags or ()), *tags] or None, name=name or run_dir.name, job_type=job_type,
                id=run_id, resume="allow", dir=str(run_dir), config=config, mode=mode,
                allow_val_change=True,  # a resume may change what may change (`total_steps`, a sweep's next budget)
                settings=wandb.Settings(silent=True, console="off", save_code=False),
            )
        except Exception as exc:  # noqa: BLE001 - W&B is an extra: the run goes on without it
            restore_environment(environment)
            log.warning("W&B did not start (%s); the run goes on without it", error_summary(exc))
            return None
        if mode != "disabled" and job_type == "train":
            run.define_metric(STEP)
            run.define_metric("*", step_metric=STEP)
        say(where_line(run.id, mode, why, run_dir / "wandb", run.url if mode == "online" else None))
        return cls(run, run_dir, environment)

    def _guard(self, what: str, action) -> None:
        if self.run is None:
            return
        try:
            action()
        except Exception as exc:  # noqa: BLE001 - W&B is an extra: training goes on without it
            log.warning("W&B: %s failed (%s); no more W&B logging in this run", what, error_summary(exc))
            with contextlib.suppress(Exception):  # already warned; what W&B wrote so far stays in RUN_DIR/wandb/
                self._close(exit_code=1)

    def log_record(self, record: dict[str, Any]) -> None:
        """One `metrics.jsonl` record as a history row (`history_row`)."""
        self._guard("logging a record", lambda: self.run.log(history_row(record, self.run_dir)))

    def log_images(self, images: dict[str, list[Path]], env_steps: int) -> None:
        """`{key: PNG paths}` as W&B images under `key` (each captioned with its file name), in one row at
        `env_steps` (the run's last)."""
        import wandb

        row = {key: [wandb.Image(str(p), caption=Path(p).name) for p in paths] for key, paths in images.items()
               if paths}
        if row:
            self._guard("logging images", lambda: self.run.log({**row, STEP: env_steps}))

    def update_summary(self, values: dict[str, Any]) -> None:
        """Set summary values (the final checkpoint's path, a sweep trial's evaluation metrics)."""
        self._guard("updating the summary", lambda: self.run.summary.update(values))

    def log_tables(self, tables: dict[str, tuple[list[str], list[list[Any]]]]) -> None:
        """`{key: (columns, rows)}` as W&B tables (a sweep's results)."""
        import wandb

        self._guard("logging tables", lambda: self.run.log(
            {key: wandb.Table(columns=columns, data=rows) for key, (columns, rows) in tables.items()}))

    def finish(self, exit_code: int = 0) -> None:
        """End the W&B run (a non-zero `exit_code` marks it failed), writing what is left to `RUN_DIR/wandb/`."""
        self._guard("finishing", lambda: self._close(exit_code))

    def _close(self, exit_code: int) -> None:
        run, self.run = self.run, None
        if run is not None:
            try:
                run.finish(exit_code=exit_code)
            finally:
                restore_environment(self.environment)


def run_config(cfg: RunConfig, run_dir: Path, run_id: str | None, extra: dict[str, Any] | None = None) -> dict:
    """The W&B config of a run: its config tree, `levelray: {run_dir, run_id}`, and `extra` (a sweep trial's)."""
    return {**to_dict(cfg), "levelray": {"run_dir": str(run_dir), "run_id": run_id}, **(extra or {})}


def start_run(cfg: RunConfig, run_dir, *, extra: dict[str, Any] | None = None, say=print) -> WandbRun | None:
    """The W&B run of a levelray run (`cfg.wandb`), `run_dir` a `RunDir`: None where `cfg.wandb.enabled` is off
    or W&B could not start."""
    if not cfg.wandb.enabled:
        return None
    return WandbRun.start(cfg.wandb, run_dir.path, run_dir.run_id,
                          config=run_config(cfg, run_dir.path, run_dir.run_id, extra), say=say)

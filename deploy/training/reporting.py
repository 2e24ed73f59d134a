"""One report of the training loop, wherever it goes: the `metrics.jsonl` record of a snapshot (`build_record`),
the rates it carries (`Throughput`, `RecentFraction`), and `Reporter`, which hands each record to every sink:
`metrics.jsonl`, TensorBoard, Weights & Biases, the backend's outside view, Prometheus and the caller's
`on_report` (the progress line, or a sweep trial's Ray Tune reports). The loop that calls it is
`deploy.training.driver`."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from levelray.contracts.config import RunConfig
from levelray.contracts.status import LEVEL_EDITOR_KEYS, StatusSnapshot, actor_counts
from levelray.deploy.rundir import RunDir
from levelray.deploy.training.periodic_eval import PeriodicEvaluator
from levelray.deploy.training.progress import say

log = logging.getLogger(__name__)

class Throughput:
    """Env steps per second between consecutive reports: the only place the rate is computed. The loop counts
    from the env steps the run starts with, so the first report has a rate too (a short run may have no other);
    the final report, written after the backend stopped, keeps the last rate when no step came in since (a
    run that ends at a report would otherwise end on a rate of 0 it never had)."""

    def __init__(self) -> None:
        self.start = time.time()
        self._last: tuple[float, int] | None = None
        self.rate = 0.0

    def update(self, env_steps: int, *, final: bool = False) -> float:
        now = time.time()
        if final and self._last is not None and env_steps == self._last[1]:
            return self.rate
        if self._last is not None and now > self._last[0] and env_steps >= self._last[1]:
            self.rate = (env_steps - self._last[1]) / (now - self._last[0])
        self._last = (now, env_steps)
        return self.rate

    @property
    def env_steps(self) -> int:
        """The env steps of the last update (0 before any)."""
        return self._last[1] if self._last is not None else 0


class RecentFraction:
    """A part's share of a total's growth since the last report (None where the total did not grow), from two
    counters of the learner: `levels_replay_fraction`, of the episodes that ended, those played on a replayed level
    (the flag the level service gave each level); `levels_trained_fraction`, of the env steps, those trained on
    (`learner_samples_with_gradient`: under Robust PLR, the replayed levels' share). Both counters grow on
    arrival with their totals, so the share stays within [0, 1] when the learner drains a backlog; the steps it
    trained on (`samples_trained`) grow later, at its updates."""

    def __init__(self) -> None:
        self._last: tuple[int, int] | None = None

    def update(self, total: int, part: int) -> float | None:
        last, self._last = self._last, (total, part)
        if last is None or total <= last[0]:
            return None
        return (part - last[1]) / (total - last[0])


def build_record(snap: StatusSnapshot, *, steps_per_second: float, elapsed_s: float,
                 replay_fraction: float | None = None, trained_fraction: float | None = None) -> dict[str, Any]:
    """The `metrics.jsonl` record of a snapshot (JSON scalars and lists only)."""
    ls, actors = snap["learner"], actor_counts(snap)
    last_actor_error = snap["supervisor"].get("last_actor_error") if "supervisor" in snap else None
    live_actors = [a for a in snap.get("supervisor", {}).get("actors", []) if a.get("alive")]
    rec: dict[str, Any] = {
        "time": time.time(),
        "elapsed_s": elapsed_s,
        "env_steps": ls["env_steps"],
        "env_steps_per_second": steps_per_second,
        "episodes": ls["episodes"],
        "episode_return_mean": ls["episode_return_mean"],
        "episode_length_mean": ls["episode_length_mean"],
        "learner_version": ls["learner_version"],
        "samples_trained": ls["samples_trained"],
        "learner_samples_received": ls.get("learner_samples_received", 0),
        "learner_samples_with_gradient": ls.get("learner_samples_with_gradient", 0),
        "levels_replay_fraction": replay_fraction,
        "levels_trained_fraction": trained_fraction,
        "policy_lag_mean": ls["policy_lag_mean"],
        "queue_depth": ls["queue_depth"],
        "actors_alive": actors["actors_alive"],
        "actors_desired": actors["actors_desired"],
        "actors_pending": actors["actors_pending"],
        "actor_restarts": actors["actor_restarts"],
        "actor_last_error": (last_actor_error or {}).get("error"),
        "learner_restarts": snap.get("learner_restarts", 0),
        "supervisor_restarts": snap.get("supervisor_restarts", 0),
        "nonfinite_updates": ls.get("nonfinite_updates", 0),
        # service calls the learner made that failed (Ray backend; the inline services raise instead)
        "replay_failures": ls.get("replay_failures", 0),
        "replay_write_failures": ls.get("replay_write_failures", {}),
        # level-service calls the live actors made that failed (refused or lost); the inline service raises instead
        "level_service_errors": sum(a.get("level_service_errors", 0) for a in live_actors),
        "dropped": ls["dropped"],
        "torch_threads": ls.get("threads"),  # the learner's (inline: the run's one process)
    }
    rec.update({f"learner_{k}": v for k, v in ls["metrics"].items() if k != "version"})
    if "levels" in snap:
        lv = snap["levels"]
        rec["level_seen_fraction"] = lv["seen_fraction"]
        rec["levels_buffered"] = lv["levels_buffered"]
        rec["levels_evicted"] = lv["levels_evicted"]
        rec["level_snapshot_errors"] = lv.get("snapshot_errors", 0)
        rec["level_score"] = lv.get("score")
        rec["level_top"] = lv.get("top_levels")
        rec.update(lv.get("level_statistics") or {})  # the family's measures of its levels (a maze's walls), if any
        rec.update({key: lv[key] for key in LEVEL_EDITOR_KEYS if key in lv})  # runs with an editor only
        if not lv.get("buffered"):  # a buffer's slots change levels at each eviction: no per-level series
            rec["level_weights"] = np.round(np.asarray(lv["weights"], dtype=float), 6).tolist()
            if "staleness_vector" in lv:
                rec["level_staleness"] = np.asarray(lv["staleness_vector"]).tolist()
    if "replay" in snap:
        rp = snap["replay"]
        rec["replay"] = {k: rp[k] for k in ("size", "inserts", "samples", "mean_uses", "snapshot_errors") if k in rp}
        rec["replay_priority_hist"] = rp.get("priority_hist")
    return rec


@dataclass(frozen=True)
class WandbExtras:
    """What a caller adds to the run's W&B run (`--wandb`): `config`, merged into its config (a sweep trial's
    `sweep`, `arm` and `seed`), and `images`, a function of the run directory that draws images when the run
    ends and returns `{summary key: PNG paths}` (the level galleries, which `deploy.report` draws: a layer this
    one does not import, so the command line, the Python API and the sweep pass it in)."""

    config: dict[str, Any] = field(default_factory=dict)
    images: Callable[[Path], dict[str, list[Path]]] | None = None
    quiet: bool = False  # no line saying where the W&B run logs (a sweep's trials: the sweep says it once)


class Reporter:
    """One report: a snapshot's record, with the held-out results that arrived since the last one, goes to
    `metrics.jsonl`, TensorBoard, Weights & Biases (`--wandb`), the backend's outside view (`backend`: the
    driver's `Backend`), Prometheus and `on_report`. `wandb` (`WandbExtras`): what a caller adds to the W&B
    run (a sweep trial's config, the level galleries drawn at the end)."""

    def __init__(self, cfg: RunConfig, run_dir: RunDir, backend, evaluator: PeriodicEvaluator, *,
                 metrics=None, on_report: Callable[[dict], None] | None = None, wandb: WandbExtras | None = None):
        self.run_dir, self.backend, self.evaluator = run_dir, backend, evaluator
        self.metrics, self.on_report = metrics, on_report
        self.throughput = Throughput()
        self.replay_fraction = RecentFraction()
        self.trained_fraction = RecentFraction()
        self.last_test: dict[str, Any] = {}  # the last successful held-out evaluation
        self.tensorboard = None
        if cfg.tensorboard:
            from levelray.deploy.monitoring.tensorboard import TensorBoardWriter

            self.tensorboard = TensorBoardWriter(run_dir.path)
        self.wandb_extras = wandb or WandbExtras()
        self.wandb = None
        if cfg.wandb.enabled:
            from levelray.deploy.monitoring.wandb_run import start_run

            self.wandb = start_run(cfg, run_dir, extra=self.wandb_extras.config,
                                   say=log.info if self.wandb_extras.quiet else say)

    def report(self, snap: StatusSnapshot, *, final: bool = False) -> dict[str, Any]:
        ls = snap["learner"]
        rate = self.throughput.update(ls["env_steps"], final=final)
        fraction = self.replay_fraction.update(ls["episodes"], ls.get("episodes_replayed", 0))
        trained = self.trained_fraction.update(ls["env_steps"], ls["learner_samples_with_gradient"])
        rec = build_record(snap, steps_per_second=rate, elapsed_s=time.time() - self.throughput.start,
                           replay_fraction=fraction, trained_fraction=trained)
        while (result := self.evaluator.poll()) is not None:  # a held-out result is logged once, when it arrives
            rec.update(result)
            if "test_return_mean" in result:  # a failed one (`test_error`) keeps the last good point
                self.last_test = result
        self.run_dir.append_metrics(rec)
        if self.tensorboard is not None:
            self.tensorboard.write(rec)
        if self.wandb is not None:
            self.wandb.log_record(rec)
        self.backend.publish(rec)
        if self.metrics is not None:
            view: StatusSnapshot = {**snap, "env_steps_per_second": rate, "levels_replay_fraction": fraction,
                                    "levels_trained_fraction": trained}
            if self.last_test:
                view["test_return_mean"] = self.last_test["test_return_mean"]
            self.metrics.update(view)
        if self.on_report is not None:
            self.on_report(rec)
        return rec

    def final_checkpoint(self, path: Path) -> None:
        """The run's final checkpoint, written: its path goes into the W&B run's summary."""
        if self.wandb is not None:
            self.wandb.update_summary({"final_checkpoint": str(path)})

    def close(self, failed: bool = False) -> None:
        """Close the event file and end the W&B run (its level galleries first, failed where the run `failed`)."""
        if self.tensorboard is not None:
            self.tensorboard.close()
        if self.wandb is not None:
            if self.wandb_extras.images is not None:
                try:
                    self.wandb.log_images(self.wandb_extras.images(self.run_dir.path), self.throughput.env_steps)
                except Exception as exc:  # noqa: BLE001 - images are an extra: the run ends as it would
                    log.warning("W&B: no level galleries (%s)", exc)
            self.wandb.finish(exit_code=1 if failed else 0)

"""`levelray train --backend inline`: the whole system in one process, synchronously.

For a GPU box without Ray, for debugging, and for the lent GPU machines (which cannot install Ray).
The same config, level sampler, replay, learner and rollout code as the Ray backend; only the
transport differs: actors are `RolloutWorker`s stepped in turn, services are their plain cores.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import numpy as np
import torch
from levelray.actors.envs import env_spec, make_env_vector
from levelray.actors.rollout import RolloutWorker
from levelray.contracts.config import RunConfig
from levelray.deploy.components import level_seeds, make_level_sampler, make_replay
from levelray.deploy.evaluate import PeriodicEvaluator
from levelray.deploy.progress import Progress, progress_line
from levelray.deploy.rundir import RunDir
from levelray.learner.learner import Learner
from levelray.learner.level_feedback import level_update_calls
from levelray.learner.replay_mixer import ReplayMixer

log = logging.getLogger(__name__)


class InlineTrainer:
    def __init__(self, cfg: RunConfig, run_dir: RunDir, *, resume: bool = False):
        self.cfg = cfg
        self.run_dir = run_dir
        torch.set_num_threads(max(1, torch.get_num_threads()))
        np.random.seed(cfg.seed)
        self.spec = env_spec(cfg.env)
        self.learner = Learner(self.spec, cfg.learner, seed=cfg.seed)
        seeds = level_seeds(cfg.env)
        self.sampler = make_level_sampler(cfg, seeds) if seeds is not None else None
        self.replay = make_replay(cfg) if cfg.replay.replay_ratio > 0 else None
        self.mixer = ReplayMixer(cfg.replay, cfg.learner.batch_size, self.replay)
        self.progress = Progress()
        if resume:
            self._restore()
        level_source = (lambda _k: self.sampler.sample()) if self.sampler is not None else None
        n_workers = max(1, cfg.actors.num_actors)
        K = cfg.actors.envs_per_actor
        self.workers = [
            RolloutWorker(
                make_env_vector(cfg.env, K, level_source, seed=cfg.seed * 1000 + i),
                cfg.actors.unroll_length,
                model_kind=cfg.learner.model,
                hidden_sizes=tuple(cfg.learner.hidden_sizes),
                actor_id=i,
                env_id_offset=i * K,
                seed=cfg.seed * 1000 + i,
            )
            for i in range(n_workers)
        ]
        self._broadcast()
        self._next_worker = 0
        self.evaluator = PeriodicEvaluator(cfg, use_ray=False)
        self._test: dict = {}

    def _restore(self) -> None:
        ckpt = self.run_dir.load_latest_checkpoint(str(self.learner.device))
        if ckpt is None:
            raise ValueError(f"--resume: no checkpoint in {self.run_dir.checkpoints}")
        self.learner.load_state_dict(ckpt["learner"])
        counters = ckpt["counters"]
        self.progress = Progress(env_steps=int(counters["env_steps"]), episodes=int(counters["episodes"]))
        if self.sampler is not None and ckpt["levels"] is not None:
            self.sampler.load_state_dict(ckpt["levels"])
        if self.replay is not None and ckpt["replay"] is not None:
            self.replay.load_state_dict(ckpt["replay"])
        log.info(
            "resumed from %s at version %d, %d env steps", ckpt["path"], self.learner.version, self.progress.env_steps
        )

    def _broadcast(self) -> None:
        version, weights = self.learner.get_weights()
        for w in self.workers:
            w.set_weights(version, weights)

    def checkpoint(self) -> None:
        self.run_dir.save_checkpoint(
            self.learner.version,
            self.learner.state_dict(),
            {"env_steps": self.progress.env_steps, "episodes": self.progress.episodes},
            level_state=self.sampler.state_dict() if self.sampler is not None else None,
            replay_state=self.replay.state_dict() if self.replay is not None else None,
            config=self.cfg,
            keep=self.cfg.keep_checkpoints,
        )

    def train_step(self) -> dict[str, float]:
        fresh = []
        for _ in range(self.mixer.num_fresh):
            worker = self.workers[self._next_worker]
            self._next_worker = (self._next_worker + 1) % len(self.workers)
            unroll = worker.unroll()
            self.progress.add_unroll(unroll, self.learner.version)
            fresh.append(unroll)
        batch, book = self.mixer.build_batch(fresh)
        metrics = self.learner.update(batch)
        outputs = self.learner.last_outputs
        self.mixer.after_update(book, outputs["abs_td"])
        if self.sampler is not None:
            for call in level_update_calls(self.cfg.levels.strategy, batch, outputs, book["widths"],
                                           len(book["fresh"])):
                self.sampler.update_with_rollouts(**call)
        self._broadcast()
        return metrics

    def run(
        self,
        stop: threading.Event | None = None,
        on_report: Callable[[dict], None] | None = None,
    ) -> dict:
        cfg = self.cfg
        last_report = time.time()
        metrics: dict[str, float] = {}
        record: dict = {}
        try:
            while self.progress.env_steps < cfg.total_steps and not (stop is not None and stop.is_set()):
                metrics = self.train_step()
                if self.learner.version % cfg.checkpoint_interval_updates == 0:
                    self.checkpoint()
                evaluated = False
                if self.evaluator.due(self.learner.version):  # held-out levels, synchronously
                    self.evaluator.maybe_start(self.learner.version, self.learner.get_weights()[1],
                                               env_steps=self.progress.env_steps)
                    self._test = self.evaluator.poll() or {}
                    evaluated = True
                reached = (
                    cfg.stop_at_return is not None
                    and len(self.progress.returns) >= self.progress.returns.maxlen // 2
                    and self.progress.mean_return >= cfg.stop_at_return
                )
                if time.time() - last_report >= cfg.report_interval_s or reached or evaluated:
                    record = self._report(metrics, on_report)
                    last_report = time.time()
                if reached:
                    break
        finally:
            record = self._report(metrics, on_report)
            self.checkpoint()
            self.run_dir.close()
        return record

    def _report(self, metrics: dict, on_report) -> dict:
        extra = {f"learner_{k}": v for k, v in metrics.items() if k not in ("version",)}
        if self.sampler is not None:
            extra["level_seen_fraction"] = self.sampler.num_seen / self.sampler.num_levels
            extra["level_weights"] = np.round(self.sampler.sample_weights(), 6).tolist()
            extra["level_staleness"] = self.sampler.staleness().tolist()
        if self.replay is not None:
            stats = self.replay.stats()
            extra["replay"] = {k: stats[k] for k in ("size", "inserts", "samples", "mean_uses")}
            extra["replay_priority_hist"] = stats["priority_hist"]
        extra.update(self._test)  # a held-out evaluation is logged once, in the report right after it
        self._test = {}
        record = self.progress.report(self.learner.version, extra)
        self.run_dir.append_metrics(record)
        if on_report is not None:
            on_report(record)
        return record


def train_inline(
    cfg: RunConfig, run_dir: RunDir, *, resume: bool = False, stop: threading.Event | None = None, quiet: bool = False
) -> dict:
    trainer = InlineTrainer(cfg, run_dir, resume=resume)
    return trainer.run(stop, None if quiet else lambda r: print(progress_line(r), flush=True))

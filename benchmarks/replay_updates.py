"""Replay a run update by update: what each learner update saw and did, around a moment its reports point at.

    python -m benchmarks.replay_updates --config RUN_DIR/config.yaml --first V --last V --jsonl OUT
        [--change-at V [--grad-clip X] [--entropy-weight X]]

A run on the inline backend (a sweep's trial) is deterministic: the same config trains the same updates, whatever
its report and checkpoint intervals. So its `config.yaml` retrains it here, and each update from version `--first`
to `--last` writes one JSON line: the learner's metrics (entropy, losses, gradient norm before the clip, PopArt's
statistics, explained variance, the mean value) and what the batch held (the behaviour policy's mean probability of
each action, the share of each action taken, successes, truncations). `--change-at V` changes the clip or the
entropy weight from update V on, to see whether that update's course changes (a what-if: from V on the run is a
different run). One torch thread, as a trial trains.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from levelray.contracts.config import from_dict
from levelray.deploy.training.inline import InlineBackend
from levelray.learner.learner import Learner

LEARNER_METRICS = ("entropy", "loss_policy", "loss_value", "loss_total", "grad_norm", "value_norm_mu",
                   "value_norm_sigma", "explained_variance", "value_mean", "rho_mean")


def batch_summary(batch: dict[str, Any]) -> dict[str, Any]:
    """What a batch `[T, B]` of a discrete-action run held: the behaviour policy's mean probability of each action,
    the share of each action taken, the steps with a reward > 0 and the truncated steps."""
    actions = np.asarray(batch["actions"])
    probs = torch.softmax(torch.as_tensor(np.asarray(batch["behaviour_params"])).float(), dim=-1)
    taken = np.bincount(actions.reshape(-1), minlength=probs.shape[-1]) / actions.size
    return {"action_probs": [round(float(p), 4) for p in probs.mean(dim=(0, 1))],
            "actions_taken": [round(float(s), 4) for s in taken],
            "rewarded_steps": int((np.asarray(batch["rewards"]) > 0).sum()),
            "truncated_steps": int(np.asarray(batch["truncated"]).sum())}


def apply_change(learner: Learner, grad_clip: float | None, entropy_weight: float | None) -> None:
    """The learner with `grad_clip` and `entropy_weight` (where given) from its next update on."""
    if grad_clip is not None:
        learner.gradient_step.clip = grad_clip
    if entropy_weight is not None:
        learner.config = dataclasses.replace(learner.config, entropy_weight=entropy_weight)


def replay(args: argparse.Namespace) -> int:
    """Train `args.config` to version `args.last`, writing each update from `args.first` on; the lines written."""
    torch.set_num_threads(1)
    backend = InlineBackend(from_dict(yaml.safe_load(Path(args.config).read_text())))
    learner = backend.core.learner
    seen: dict[str, Any] = {}
    step = learner.step

    def watched_step(batch: dict[str, Any], replayed: Any = None):
        if args.first <= learner.version <= args.last:
            seen.update(batch_summary(batch))
        return step(batch, replayed)

    learner.step = watched_step  # this learner's `update` steps through it
    written = 0
    try:
        with open(args.jsonl, "w") as out:
            while learner.version <= args.last:
                version = learner.version
                if version == args.change_at:
                    apply_change(learner, args.grad_clip, args.entropy_weight)
                metrics = backend.train_step()
                if metrics and version >= args.first:
                    kept = {k: metrics[k] for k in LEARNER_METRICS if k in metrics}
                    out.write(json.dumps({"version": version, **seen, **kept}) + "\n")
                    written += 1
    finally:
        backend.close()
    return written


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True, help="a run's config.yaml (a sweep trial's: inline backend)")
    parser.add_argument("--first", type=int, required=True, help="the first learner version written")
    parser.add_argument("--last", type=int, required=True, help="the last learner version written")
    parser.add_argument("--jsonl", required=True, help="where each update's line goes")
    parser.add_argument("--change-at", type=int, default=-1, help="the version from which the changes below apply")
    parser.add_argument("--grad-clip", type=float, default=None, help="learner.grad_clip from --change-at on")
    parser.add_argument("--entropy-weight", type=float, default=None,
                        help="learner.entropy_weight from --change-at on")
    args = parser.parse_args()
    if args.first > args.last:
        parser.error(f"--first {args.first} is after --last {args.last}")
    print(f"wrote {replay(args)} updates to {args.jsonl}")


if __name__ == "__main__":
    main()

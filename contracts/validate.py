"""Checks of a whole run config, made once before anything starts (`deploy.training.driver.prepare_run_dir`, which the
command line and `levelray.train` both call before the run directory is claimed, for either backend).

A leaf's own type, choices and bounds are checked where it is set (`contracts.config.coerce_value`); they are
checked again here because a `RunConfig` built in Python never went through that. What else is refused, each
problem named by the dotted paths of its fields:

- `replay.replay_ratio × learner.batch_size` that is not a whole number. The learner replays
  `round(ratio × batch)` unrolls per batch (`learner.replay_feed`, Python's round: halves go to the even
  number), so a fractional product silently trains with another ratio; below one half it replays nothing,
  and where it rounds up to the whole batch the learner fails on its first batch.
- `learner.device` other than auto, cpu, cuda or cuda:N; cuda where the learner's machine has no CUDA GPU
  (or not that many); cuda:N with N >= 1 on the Ray backend, whose learner actor sees its one GPU as cuda:0.
  Joining a cluster (`address`), the learner may run on another machine: `RayJob.start` checks the
  cluster's GPUs once it is connected.
- `actors.device` other than auto, cpu, cuda or cuda:N; cuda on the Ray backend (its env actors act on CPU), or
  where this machine has no CUDA GPU (or not that many).
- Clip thresholds that turn learning off or around: `learner.clip_rho` and `learner.clip_pg_rho` <= 0,
  `learner.clip_c` < 0 (0 is allowed: c-bar = 0 cuts every trace, the one-step targets lambda = 0 also
  gives), `learner.grad_clip` = 0 unless `learner.grad_clip_type` is none.
- Intervals below a floor: the report interval on the Ray backend, the level and replay service snapshot
  intervals (see the constants below for why those floors). `eval.video_interval` without periodic evaluation
  (`eval.interval_updates` 0): its videos are recorded with the evaluations, so there would be none.
- `replay.min_size` above `replay.capacity` while replay is on (replayed unrolls, or the model loss): the
  buffer could never be sampled.
- The model loss (`model_loss.loss muzero`): `model_loss.num_unroll_steps` >= `actors.unroll_length` (a K-step window
  fits only from starts t <= T - K: one start at K = T, none beyond), `model_loss.td_steps` 0, `model_loss.min_td_steps`
  above `model_loss.td_steps` or a dynamic horizon (`model_loss.max_bootstrap_age` > 0) with `model_loss.td_steps` -1,
  `model_loss.target_update_tau` 0 (the target network would never move), the model loss with every term off
  (`model_loss.loss_weight` 0), `replay.max_use` too small to serve one model batch, and an LSTM core
  (`learner.lstm_size` > 0: see `lstm_model_loss_message`).
  The model loss needs discrete actions (`check_model_loss_actions`): checked by
  `deploy.training.driver.prepare_run_dir` once the env's spec is known.
- PLR's level buffer (a scored strategy on an unbounded level space) with no room (`levels.buffer_size` 0).
- A level editor (`levels.editor`, ACCEL's `accel`) without what it needs: an unbounded level space
  (`env.num_levels` 0), a scored `levels.strategy`, and `levels.robust` (children are never trained on). The env
  family it edits is the editor's own to check (`level_service.editors.editor_problems`), before the run starts.
- APPO's settings (`learner.appo`) with `learner.algorithm impala`, more minibatches than a batch has env
  columns, an advantage scale without PopArt, or a bf16 LSTM precision without an LSTM or on a GPU
  (`contracts.config_learner.learner_problems`).

The rules a service also needs of the section it is handed are written here once and called there too, so that
both refuse in the same words: a section's leaves (`leaf_problems`), the level buffer's needs
(`level_buffer_problems`) and the editor's needs of the level space (`editor_space_problems`).

`actors.unroll_length` (T >= 1 as a leaf) is checked against the model loss's unroll only: V-trace, every
PLR score (one_step_td_error uses the bootstrap row) and replay work with T = 1. `checkpoint_interval_updates`
keeps its floor of one update: an update takes from about a millisecond (CartPole MLP) to a second (IMPALA
CNN, large batch), so no count is too small for every run, and short runs need small ones.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from levelray.contracts.config import (
    ConfigError,
    LevelConfig,
    ModelLossConfig,
    RunConfig,
    coerce_value,
    get_path,
    leaves,
    uses_replay,
)
from levelray.contracts.config_learner import learner_problems
from levelray.contracts.levels import UNSCORED_STRATEGIES
from levelray.contracts.spec import EnvSpec

# The Ray driver never polls the job more often than this (`deploy.training.ray_backend` waits at least this long
# between polls: each one is a remote call to the learner, the supervisor and both services), so a shorter
# report interval there is not what the run would do. The inline backend has no such floor: there 0 means a
# record after every update, which short test runs use.
MIN_RAY_REPORT_INTERVAL_S = 0.1
# A service writes its snapshot inside a call (no background thread), blocking every caller meanwhile.
# Measured here: the replay snapshot at the default --replay-snapshot-bytes (64 MiB of procgen unrolls) took
# 0.18-0.27 s, so at a 1 s interval the replay service already spends about a fifth of its time writing (the
# learner's sample calls wait behind it), and below that it approaches writing after every call. The level
# snapshot takes ~1 ms (10,000 levels), but a shorter interval saves nothing worth an fsync per call: a
# restarted service loses under a second of score updates either way.
MIN_SNAPSHOT_INTERVAL_S = 1.0
_DEVICE = re.compile(r"auto|cpu|cuda(?::(\d+))?")
_WHOLE_TOLERANCE = 1e-9  # 0.1 * 30 is 3.0000000000000004 in floating point


@dataclass(frozen=True)
class Problem:
    paths: tuple[str, ...]  # the dotted names of the fields involved
    message: str  # names them too

    def __str__(self) -> str:
        return self.message


def leaf_problems(section: Any, prefix: str = "") -> list[Problem]:
    """Every leaf of `section` (the whole `RunConfig`, or one section with its dotted `prefix`, e.g. "levels.")
    through `coerce_value` again, against its type, choices and bounds in the field's metadata: a value a section
    kept as given because it does not convert (see `contracts.config`'s sections), or one out of range in a
    section built in Python, is refused with its dotted path. The services check the sections they are handed
    with this (`level_service.checks`), so a leaf's range is written once, in its metadata."""
    found = []
    for path, f, tp in leaves(type(section), prefix):
        try:
            coerce_value(path, tp, get_path(section, path.removeprefix(prefix)), dict(f.metadata))
        except ConfigError as exc:
            found.append(Problem((path,), str(exc)))
    return found


def _replay_problems(cfg: RunConfig) -> list[Problem]:
    ratio, batch, found = cfg.replay.replay_ratio, cfg.learner.batch_size, []
    product = ratio * batch
    if not _whole(product):
        replayed = int(round(product))  # what learner.replay_feed.ReplayFeed does
        if replayed == 0:
            effect = "so the replay buffer would be filled and never sampled"
        elif replayed >= batch:
            effect = "leaving no fresh unroll: the learner would fail on its first batch"
        else:
            effect = f"an effective ratio of {replayed / batch:.3g} instead of {ratio:g}"
        hints = []
        batches = [b for b in range(batch + 1, 4097) if _whole(ratio * b)]
        if batches:
            hints.append(f"--batch-size {batches[0]}")
        # ratios k/batch that survive being typed with 4 significant digits, nearest first
        ratios = [text for k in range(1, batch) if _whole(float(text := f"{k / batch:.4g}") * batch)
                  and float(text) <= 0.95]
        if ratios:
            hints.append("--replay-ratio " + " or ".join(sorted(ratios, key=lambda r: abs(float(r) - ratio))[:2]))
        found.append(Problem(
            ("replay.replay_ratio", "learner.batch_size"),
            f"replay.replay_ratio × learner.batch_size = {ratio:g} × {batch} = {product:g} is not a whole number "
            f"of replayed unrolls per batch: the learner would replay round({product:g}) = {replayed} of {batch}, "
            f"{effect}; choose values "
            f"whose product is an integer" + (f" (e.g. {', or '.join(hints)})" if hints else ""),
        ))
    if uses_replay(cfg) and cfg.replay.min_size > cfg.replay.capacity:
        found.append(Problem(
            ("replay.min_size", "replay.capacity"),
            f"replay.min_size = {cfg.replay.min_size} is above replay.capacity = {cfg.replay.capacity}: the "
            f"buffer never holds enough unrolls to be sampled, so nothing would be replayed"
            + (" and the model loss (model_loss.loss) would never train" if cfg.model_loss.loss != "none" else ""),
        ))
    return found


def _model_problems(cfg: RunConfig) -> list[Problem]:
    m, found = cfg.model_loss, []
    if m.loss == "none":
        return found
    if cfg.learner.lstm_size:
        found.append(Problem(("learner.lstm_size", "model_loss.loss"), lstm_model_loss_message(cfg.learner.lstm_size,
                                                                                               m.loss)))
    if m.num_unroll_steps >= cfg.actors.unroll_length:
        found.append(Problem(
            ("model_loss.num_unroll_steps", "actors.unroll_length"),
            f"model_loss.num_unroll_steps = {m.num_unroll_steps} is not below actors.unroll_length = "
            f"{cfg.actors.unroll_length}: a K-step window fits into a stored unroll of T steps only from starts "
            f"t <= T - K (at K = T one start in T, beyond it none), so nearly every sequence would run off the "
            f"end and its later steps would be masked; use --model-unroll-steps below --unroll-length (default "
            f"5 with 20)",
        ))
    if m.td_steps == 0:
        found.append(Problem(("model_loss.td_steps",),
                             "model_loss.td_steps must be >= 1, or -1 for 'to the end of the stored sequence', got 0"))
    if m.max_bootstrap_age > 0 and m.td_steps == -1:
        found.append(Problem(
            ("model_loss.max_bootstrap_age", "model_loss.td_steps"),
            "model_loss.max_bootstrap_age > 0 (dynamic horizon) needs a finite model_loss.td_steps (the horizon of "
            "fresh data), got -1",
        ))
    if m.max_bootstrap_age > 0 and m.td_steps >= 1 and m.min_td_steps > m.td_steps:
        found.append(Problem(
            ("model_loss.min_td_steps", "model_loss.td_steps"),
            f"model_loss.min_td_steps = {m.min_td_steps} is above model_loss.td_steps = {m.td_steps}: the dynamic "
            f"horizon shrinks from td_steps (fresh data) to min_td_steps (old data)",
        ))
    if m.target_update_tau <= 0:
        found.append(Problem(
            ("model_loss.target_update_tau",),
            "model_loss.target_update_tau must be in (0, 1] (1: hard copy), got 0: the target network would never "
            "move from the initial weights",
        ))
    if m.loss_weight <= 0:
        found.append(Problem(
            ("model_loss.loss_weight", "model_loss.loss"),
            "model_loss.loss_weight = 0 with model_loss.loss muzero trains nothing but costs every update; use "
            "--model-loss none to turn it off",
        ))
    uses = cfg.replay.max_use
    needed = -(-m.batch_size // 4)  # learner.model_batch.SEQUENCES_PER_UNROLL sequences per unroll
    if uses is not None and uses * cfg.replay.capacity < needed:
        found.append(Problem(
            ("replay.max_use", "replay.capacity", "model_loss.batch_size"),
            f"replay.max_use × replay.capacity = {uses} × {cfg.replay.capacity} uses cannot serve one model batch "
            f"of {needed} unrolls (model_loss.batch_size {m.batch_size}, 4 sequences per unroll)",
        ))
    return found


def lstm_model_loss_message(lstm_size: int, loss: str) -> str:
    """Why the model loss and an LSTM core are refused together (here and by `learner.model_loss`)."""
    return (f"--lstm-size {lstm_size} (learner.lstm_size) with --model-loss {loss} (model_loss.loss) is not "
            f"supported: the model loss unrolls its dynamics from the torso's representation of one observation, "
            f"which for a recurrent policy is not the state its heads read (that needs the core state of every "
            f"replayed window); use --lstm-size 0 or --model-loss none")


def check_model_loss_actions(model_loss: ModelLossConfig, spec: EnvSpec, env_id: str | None = None) -> None:
    """ConfigError unless the model loss (`model_loss.loss`) is off or the env (`spec`, of `env.id` `env_id` where
    known) has discrete actions: the model's dynamics takes a one-hot action and its policy head is categorical."""
    if model_loss.loss == "none" or spec.discrete:
        return
    env = f"env.id {env_id!r}" if env_id is not None else "the env (env.id)"
    raise ConfigError(f"model_loss.loss = {model_loss.loss!r} needs discrete actions (its dynamics takes a one-hot "
                      f"action and its policy head is categorical), but {env} has continuous ones; use "
                      f"--model-loss none")


def _whole(x: float) -> bool:
    return math.isclose(x, round(x), rel_tol=0.0, abs_tol=_WHOLE_TOLERANCE)


def _device_problems(cfg: RunConfig) -> list[Problem]:
    device = cfg.learner.device
    match = _DEVICE.fullmatch(device)
    if match is None:
        return [Problem(("learner.device",),
                        f"learner.device: expected auto, cpu, cuda or cuda:N, got {device!r}")]
    if not device.startswith("cuda"):
        return []
    index = int(match.group(1) or 0)
    if cfg.backend == "ray" and index > 0 and not os.environ.get("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"):
        return [Problem(
            ("learner.device", "backend"),
            f"learner.device = {device!r} with backend ray: Ray gives the learner actor one GPU and sets "
            f"CUDA_VISIBLE_DEVICES to it, so the actor sees it as cuda:0 and has no {device}; use --device cuda "
            f"(Ray picks the GPU), or --backend inline to pick one on this machine",
        )]
    if cfg.backend == "ray" and cfg.address:
        return []  # the learner may run on another node: checked against the cluster in RayJob.start
    import torch

    where = "this machine" + (" (where the embedded Ray runs the learner)" if cfg.backend == "ray" else "")
    if not torch.cuda.is_available():
        return [Problem(
            ("learner.device",),
            f"learner.device = {device!r}, but {where} has no CUDA GPU (torch.cuda.is_available() is False); "
            f"use --device auto (a GPU when there is one) or --device cpu",
        )]
    count = torch.cuda.device_count()
    if index >= count:
        return [Problem(
            ("learner.device",),
            f"learner.device = {device!r}, but {where} has {count} CUDA device(s), cuda:0 to cuda:{count - 1}",
        )]
    return []


def _actor_device_problems(cfg: RunConfig) -> list[Problem]:
    """`actors.device`: its form, the backend that can use it, and the GPU it names."""
    device = cfg.actors.device
    match = _DEVICE.fullmatch(device)
    if match is None:
        return [Problem(("actors.device",), f"actors.device: expected auto, cpu, cuda or cuda:N, got {device!r}")]
    if not device.startswith("cuda"):
        return []
    if cfg.backend == "ray":
        return [Problem(("actors.device", "backend"),
                        f"actors.device = {device!r} with backend ray: the Ray backend's env actors act on CPU (the "
                        f"learner takes the GPU); use --backend inline for actors on this machine's GPU, or "
                        f"--actor-device auto")]
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = int(match.group(1) or 0)
    if index >= count:
        return [Problem(("actors.device",),
                        f"actors.device = {device!r}, but this machine has {count} CUDA device(s); use "
                        f"--actor-device auto (the learner's device) or --actor-device cpu")]
    return []


def ray_resources(text: str, field: str = "learner.resources") -> dict[str, float]:
    """`learner.resources` or `service_resources` (`field`), "NAME=AMOUNT[,NAME=AMOUNT]", as Ray's `resources`
    dict; ValueError naming `field` and the part that is not NAME=AMOUNT with AMOUNT > 0."""
    out: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, sep, amount = part.partition("=")
        try:
            value = float(amount)
        except ValueError:
            value = -1.0
        if not sep or not name.strip() or not value > 0:
            raise ValueError(f"{field}: expected NAME=AMOUNT[,NAME=AMOUNT] with AMOUNT > 0, got {part!r}")
        out[name.strip()] = value
    return out


def _learner_placement_problems(cfg: RunConfig) -> list[Problem]:
    found = []
    if cfg.learner.num_learners > 1 and cfg.backend != "ray":
        found.append(Problem(("learner.num_learners", "backend"),
                             f"learner.num_learners = {cfg.learner.num_learners} needs backend ray (each learner is "
                             f"a Ray actor of its own); the inline backend trains in one process: use one learner"))
    for field, text in (("learner.resources", cfg.learner.resources), ("service_resources", cfg.service_resources)):
        try:
            ray_resources(text, field)
        except ValueError as exc:
            found.append(Problem((field,), str(exc)))
    return found


def _clip_problems(cfg: RunConfig) -> list[Problem]:
    lr, found = cfg.learner, []
    for name, lowest, effect in (
        ("clip_rho", "> 0", "V-trace clamps the importance ratios at it: 0 makes every value target the current "
                            "value (no value learning), a negative one reverses the TD errors"),
        ("clip_pg_rho", "> 0", "the policy-gradient advantages are scaled by the clamped ratios: 0 zeroes them "
                               "(no policy learning), a negative one reverses them"),
        ("clip_c", ">= 0", "a negative c-bar makes the traces negative (0 is allowed: one-step targets)"),
    ):
        value = getattr(lr, name)
        if value is not None and (value <= 0 if lowest == "> 0" else value < 0):
            found.append(Problem((f"learner.{name}",),
                                 f"learner.{name} must be {lowest} or none (no clip), got {value:g}: {effect}"))
    if lr.grad_clip_type != "none" and lr.grad_clip <= 0:
        found.append(Problem(
            ("learner.grad_clip", "learner.grad_clip_type"),
            f"learner.grad_clip = {lr.grad_clip:g} with learner.grad_clip_type {lr.grad_clip_type} clips every "
            f"gradient to zero, so nothing would be learned; use a positive threshold, or --grad-clip-type none",
        ))
    return found


def _interval_problems(cfg: RunConfig) -> list[Problem]:
    found = []
    if cfg.backend == "ray" and cfg.report_interval_s < MIN_RAY_REPORT_INTERVAL_S:
        found.append(Problem(
            ("report_interval_s", "backend"),
            f"report_interval_s = {cfg.report_interval_s:g} is below {MIN_RAY_REPORT_INTERVAL_S:g} s, the most "
            f"often the Ray backend polls the job (faster polling only loads its actors); use at least "
            f"{MIN_RAY_REPORT_INTERVAL_S:g}, or --backend inline where 0 writes a record after every update",
        ))
    for path, value, why in (
        ("levels.snapshot_interval_s", cfg.levels.snapshot_interval_s,
         "an fsync inside nearly every call, to save less than a second of score updates"),
        ("replay.snapshot_interval_s", cfg.replay.snapshot_interval_s,
         "a snapshot of the default 64 MiB of unrolls takes ~0.2 s, so the service would spend much of its "
         "time writing while the learner's sample calls wait"),
    ):
        if value < MIN_SNAPSHOT_INTERVAL_S:
            found.append(Problem(
                (path,),
                f"{path} = {value:g} is below {MIN_SNAPSHOT_INTERVAL_S:g} s: the service writes its snapshot "
                f"inside a call, blocking its callers: {why}",
            ))
    return found


def _video_problems(cfg: RunConfig) -> list[Problem]:
    if cfg.eval.video_interval > 0 and cfg.eval.interval_updates <= 0:
        return [Problem(
            ("eval.video_interval", "eval.interval_updates"),
            f"eval.video_interval = {cfg.eval.video_interval} records a video with every Nth periodic held-out "
            f"evaluation, but eval.interval_updates = {cfg.eval.interval_updates} turns those off; add "
            f"--eval-interval M (learner updates between evaluations) or drop --video-interval",
        )]
    return []


def level_buffer_problems(levels: LevelConfig) -> list[Problem]:
    """What PLR's level buffer (`level_service.buffer`, the level service on an unbounded level space) needs of
    the `levels` section: a scored strategy, as it keeps the levels that score highest, and room for a level. The
    run config is checked with it where it has a buffer, and so is the buffer when it is built."""
    found = []
    if levels.strategy in UNSCORED_STRATEGIES:
        found.append(Problem(
            ("levels.strategy", "env.num_levels"),
            f"levels.strategy must be a scored one for a level buffer (an unbounded level space, env.num_levels = "
            f"0, with PLR), not {levels.strategy}: random and sequential never score a level",
        ))
    elif levels.buffer_size == 0:
        found.append(Problem(
            ("levels.buffer_size", "levels.strategy", "env.num_levels"),
            f"levels.buffer_size = 0 with levels.strategy {levels.strategy} on an unbounded level space "
            f"(env.num_levels = 0) leaves PLR nowhere to keep a level; use --level-buffer-size N (DCD: 4000), or "
            f"--level-strategy random for domain randomisation",
        ))
    return found


def _level_problems(cfg: RunConfig) -> list[Problem]:
    lv = cfg.levels
    scored = lv.strategy not in UNSCORED_STRATEGIES
    # an unbounded space without a scored strategy is domain randomisation: no level service, no buffer; PLR's
    # buffer is PLR's (a curriculum of one's own checks its own settings where it is built)
    plr_buffer = scored and cfg.env.num_levels == 0 and lv.source == "plr"
    found = level_buffer_problems(lv) if plr_buffer else []
    if lv.robust and not scored and lv.source == "plr":  # PLR replays scored levels only; other sources say what
        found.append(Problem(
            ("levels.robust", "levels.strategy"),
            f"levels.robust trains only on replayed levels, but levels.strategy {lv.strategy} never replays one "
            f"(nothing would be trained); use a scored strategy such as --level-strategy positive_value_loss",
        ))
    if lv.robust and cfg.model_loss.loss != "none":
        found.append(Problem(
            ("levels.robust", "model_loss.loss"),
            f"levels.robust with model_loss.loss {cfg.model_loss.loss} is not supported: the model loss is not "
            f"masked to replayed levels, so new levels would still move the torso; use one or the other",
        ))
    return [*found, *_editor_problems(cfg)]


def _editor_problems(cfg: RunConfig) -> list[Problem]:
    """ACCEL's editor needs what its children are: levels held as data, kept in a level buffer
    (`editor_space_problems`), scored by a strategy, and (as ACCEL is Robust PLR plus the editor) played without
    gradient. The env family an editor edits is the editor's to say (`level_service.editors.editor_problems`: the
    run is checked with it before it starts)."""
    lv = cfg.levels
    found = editor_space_problems(lv.editor, unbounded=cfg.env.num_levels == 0)
    if lv.editor == "none":
        return found
    if lv.strategy in UNSCORED_STRATEGIES:
        found.append(editor_needs(lv.editor, "levels.strategy", f"a scored strategy (not {lv.strategy}), such as "
                                                                "--level-strategy positive_value_loss"))
    if not lv.robust:
        found.append(editor_needs(lv.editor, "levels.robust", "Robust PLR (--level-robust): children are scored, "
                                                              "never trained on"))
    return found


def editor_space_problems(editor: str, *, unbounded: bool) -> list[Problem]:
    """What any editor (`levels.editor` other than none) needs of the level space: an unbounded one (`unbounded`: its
    children are levels outside any fixed set). The run config is checked with it, and so is the level service where
    it makes the editor (`level_service.editors.editor_problems`, with the editor's env family)."""
    if editor == "none" or unbounded:
        return []
    return [editor_needs(editor, "env.num_levels", "an unbounded level space (--num-levels 0): its children are "
                                                   "levels outside any fixed set")]


def editor_needs(editor: str, path: str, what: str) -> Problem:
    """The refusal of `levels.editor` `editor` for want of `what` (in the words of field `path`)."""
    return Problem(("levels.editor", path), f"levels.editor {editor} needs {what}")


def problems(cfg: RunConfig) -> list[Problem]:
    """Everything wrong with `cfg`; leaf problems alone when there are any (the rest assume sound leaves)."""
    found = leaf_problems(cfg)
    if found:
        return found
    return [*_replay_problems(cfg), *_model_problems(cfg), *_device_problems(cfg), *_actor_device_problems(cfg),
            *_learner_placement_problems(cfg),
            *_clip_problems(cfg), *_interval_problems(cfg), *_video_problems(cfg), *_level_problems(cfg),
            *(Problem(paths, message) for paths, message in learner_problems(cfg.learner, cfg.actors.envs_per_actor))]


def validate(cfg: RunConfig, *, fixed: Collection[str] = ()) -> list[Problem]:
    """Raise `ConfigError` naming every problem of `cfg`, one per line.

    `fixed`: dotted paths whose values cannot be changed (a resumed run's, which its checkpoint was trained
    with). A problem that involves only such fields is returned instead of raised: refusing it would leave
    the run impossible to resume. Returns those (an empty list for a sound config)."""
    found = problems(cfg)
    kept = [p for p in found if p.paths and all(path in fixed for path in p.paths)]
    refused = [p for p in found if p not in kept]
    if len(refused) == 1:
        raise ConfigError(refused[0].message)
    if refused:
        raise ConfigError(f"{len(refused)} problems in the config:\n" + "\n".join(f"  - {p}" for p in refused))
    return kept

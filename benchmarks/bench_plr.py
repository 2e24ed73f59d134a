"""Benchmark: levelray's PLR sampler vs a faithful re-implementation of the reference (DI-engine's
`LevelSampler`), plus `sample_seeds` through Ray.

    .venv/bin/python -m benchmarks.bench_plr [--quick] [--json benchmarks/out/bench_plr.json] [--no-ray]

Measured per level count (200, 10,000, 100,000):
* update: the level service's work for 64 env columns x 256 steps, strategy value_l1, episodes ending with
  probability 1/100 per step, consecutive unrolls of continuous episode streams (so episodes span unrolls).
  Ours takes the unroll's finished episodes as the actors report them (`update_with_episodes` of their
  `EpisodeResults`, each scored where it was played; the score here is the |advantage| of its last step, which
  the timing does not depend on); the reference scores the unroll's steps itself (`update_with_rollouts`, the
  learner-side path).  Ours is also timed including the first `sample()` after the update, which pays the
  lazy rebuild of the cached score distribution (rank transform, O(n log n)).
* sample: one `sample()` in the default configuration (proportionate, rank T=0.1, staleness_coef 0.1,
  power staleness T=1) with every level seen.
* Ray: `ray.get(service.sample_seeds.remote(n))` round trips from the driver (a client) for n=1 and n=32, and
  `sample_levels(32)` (seeds and replay flags) on the same fixed set and on a full level buffer (n=1, 32).

Level buffer (`LevelBuffer`, unbounded level space), 4,000 levels buffered (DCD's buffer size), schedule fixed,
replay_prob 0.5; the default config (value_l1) and Robust PLR's (DCD: positive_value_loss, rank T=0.3,
staleness_coef 0.3). The update stream above takes its levels from the buffer's own (untimed) draws, one per
episode start, so about half the episodes are new levels competing for entry; the stream first fills the buffer.
* update: as above; "+rebuild": plus the draws after it up to the first that rebuilds the cached score CDF (the
  first score-driven replay: new levels and staleness draws do not read it);
* draw: one `draw()`, replay and new mixed, buffer full (mean over k draws after 1,000 warm-up draws);
  `draw_many(64)`: per level, as the level service answers an actor's prefetch.

The reference keeps its structure: per-actor Python loop over episodes with torch score functions, then
the loop over every (actor, level) pair committing partial scores; `sample()` rebuilds the rank and
staleness weights over all levels and calls `np.random.choice` with them.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

import numpy as np

from benchmarks.common import print_table, write_json
from levelray.contracts.config import LevelConfig
from levelray.contracts.levels import EpisodeResults
from levelray.level_service.buffer import LevelBuffer
from levelray.level_service.sampler import LevelSampler

T_STEPS, N_COLS = 256, 64
COLUMNS = [
    ("levels", "levels"),
    ("update_ours_s", "update ours", lambda s: f"{s * 1e3:.3f} ms"),
    ("update_plus_first_sample_ours_s", "+1st sample", lambda s: f"{s * 1e3:.3f} ms"),
    ("update_reference_s", "update ref", lambda s: f"{s * 1e3:.1f} ms"),
    ("update_speedup", "speedup", lambda x: f"{x:.0f}x"),
    ("sample_ours_s", "sample ours", lambda s: f"{s * 1e6:.2f} us"),
    ("sample_reference_s", "sample ref", lambda s: f"{s * 1e6:.1f} us"),
    ("sample_speedup", "speedup", lambda x: f"{x:.0f}x"),
]
BUFFER_SIZE = 4000  # DCD's level_replay_seed_buffer_size
_DCD = {"replay_schedule": "fixed", "replay_prob": 0.5, "buffer_size": BUFFER_SIZE}
BUFFER_CONFIGS = {
    "value_l1": LevelConfig(**_DCD),
    "positive_value_loss": LevelConfig(strategy="positive_value_loss", temperature=0.3, staleness_coef=0.3, **_DCD),
}
PREFETCH = 64  # levels per draw_many call: an actor's refill on CartPole is a few hundred
BUFFER_COLUMNS = [
    ("strategy", "strategy"),
    ("update_s", "update", lambda s: f"{s * 1e3:.3f} ms"),
    ("update_plus_rebuild_s", "+rebuild", lambda s: f"{s * 1e3:.3f} ms"),
    ("draw_s", "draw", lambda s: f"{s * 1e6:.2f} us"),
    ("draw_many_s", f"draw_many({PREFETCH}) per level", lambda s: f"{s * 1e6:.2f} us"),
    ("new_per_update", "new eps/update", lambda x: f"{x:.0f}"),
    ("replayed_per_update", "replayed eps/update", lambda x: f"{x:.0f}"),
    ("inserted_per_update", "entered/update", lambda x: f"{x:.1f}"),
]


# --------------------------------------------------------------------------- faithful reference
class RefLevelSampler:
    """DI-engine LevelSampler, re-implemented with the same loops, torch ops and transforms."""

    def __init__(
        self,
        seeds,
        num_actors,
        *,
        strategy="value_l1",
        replay_schedule="proportionate",
        score_transform="rank",
        temperature=0.1,
        eps=0.05,
        rho=0.2,
        nu=0.5,
        alpha=1.0,
        staleness_coef=0.1,
        staleness_transform="power",
        staleness_temperature=1.0,
    ):
        self.strategy = strategy
        self.replay_schedule = replay_schedule
        self.score_transform = score_transform
        self.temperature = temperature
        self.eps = eps
        self.rho = rho
        self.nu = nu
        self.alpha = alpha
        self.staleness_coef = staleness_coef
        self.staleness_transform = staleness_transform
        self.staleness_temperature = staleness_temperature
        self.seeds = np.array(seeds, dtype=np.int64)
        self.seed2index = {seed: i for i, seed in enumerate(seeds)}
        self.unseen_seed_weights = np.ones(len(seeds))
        self.seed_scores = np.zeros(len(seeds))
        self.partial_seed_scores = np.zeros((num_actors, len(seeds)), dtype=np.float32)
        self.partial_seed_steps = np.zeros((num_actors, len(seeds)), dtype=np.int64)
        self.seed_staleness = np.zeros(len(seeds))
        self.next_seed_index = 0

    def update_with_rollouts(self, train_data, num_actors):
        total_steps = train_data["reward"].shape[0]
        self._update_with_rollouts(train_data, num_actors, total_steps, self._value_l1)
        for actor_index in range(self.partial_seed_scores.shape[0]):
            for seed_idx in range(self.partial_seed_scores.shape[1]):
                if self.partial_seed_scores[actor_index][seed_idx] != 0:
                    self.update_seed_score(actor_index, seed_idx, 0, 0)
        self.partial_seed_scores.fill(0)
        self.partial_seed_steps.fill(0)

    def update_seed_score(self, actor_index, seed_idx, score, num_steps):
        score = self._partial_update_seed_score(actor_index, seed_idx, score, num_steps, done=True)
        self.unseen_seed_weights[seed_idx] = 0.0
        old_score = self.seed_scores[seed_idx]
        self.seed_scores[seed_idx] = (1 - self.alpha) * old_score + self.alpha * score

    def _partial_update_seed_score(self, actor_index, seed_idx, score, num_steps, done=False):
        partial_score = self.partial_seed_scores[actor_index][seed_idx]
        partial_num_steps = self.partial_seed_steps[actor_index][seed_idx]
        running_num_steps = partial_num_steps + num_steps
        merged_score = partial_score + (score - partial_score) * num_steps / float(running_num_steps)
        if done:
            self.partial_seed_scores[actor_index][seed_idx] = 0.0
            self.partial_seed_steps[actor_index][seed_idx] = 0
        else:
            self.partial_seed_scores[actor_index][seed_idx] = merged_score
            self.partial_seed_steps[actor_index][seed_idx] = running_num_steps
        return merged_score

    def _value_l1(self, **kwargs):
        return kwargs["adv"].abs().mean().item()

    def _update_with_rollouts(self, train_data, num_actors, all_total_steps, score_function):
        import torch

        per = int(all_total_steps / num_actors)
        level_seeds = train_data["seed"].reshape(num_actors, per).transpose(0, 1)
        policy_logits = train_data["logit"].reshape(num_actors, per, -1).transpose(0, 1)
        done = train_data["done"].reshape(num_actors, per).transpose(0, 1)
        total_steps, num_actors = policy_logits.shape[:2]
        for actor_index in range(num_actors):
            done_steps = done[:, actor_index].nonzero()[:total_steps, 0]
            start_t = 0
            for t in done_steps:
                if not start_t < total_steps:
                    break
                if t == 0:
                    continue
                seed_t = int(level_seeds[start_t, actor_index].item())
                seed_idx_t = self.seed2index[seed_t]
                kw = {}
                episode_logits = policy_logits[start_t:t, actor_index]
                kw["episode_logits"] = torch.log_softmax(episode_logits, -1)
                rewards = train_data["reward"].reshape(num_actors, per).transpose(0, 1)
                adv = train_data["adv"].reshape(num_actors, per).transpose(0, 1)
                value = train_data["value"].reshape(num_actors, per).transpose(0, 1)
                kw["adv"] = adv[start_t:t, actor_index]
                kw["rewards"] = rewards[start_t:t, actor_index]
                kw["value"] = value[start_t:t, actor_index]
                score = score_function(**kw)
                self.update_seed_score(actor_index, seed_idx_t, score, len(episode_logits))
                start_t = t.item()
            if start_t < total_steps:
                seed_idx_t = self.seed2index[level_seeds[start_t, actor_index].item()]
                kw = {}
                episode_logits = policy_logits[start_t:, actor_index]
                kw["episode_logits"] = torch.log_softmax(episode_logits, -1)
                rewards = train_data["reward"].reshape(num_actors, per).transpose(0, 1)
                adv = train_data["adv"].reshape(num_actors, per).transpose(0, 1)
                value = train_data["value"].reshape(num_actors, per).transpose(0, 1)
                kw["adv"] = adv[start_t:, actor_index]
                kw["rewards"] = rewards[start_t:, actor_index]
                kw["value"] = value[start_t:, actor_index]
                score = score_function(**kw)
                self._partial_update_seed_score(actor_index, seed_idx_t, score, len(episode_logits))

    def _update_staleness(self, selected_idx):
        if self.staleness_coef > 0:
            self.seed_staleness += 1
            self.seed_staleness[selected_idx] = 0

    def _sample_replay_level(self):
        sample_weights = self._sample_weights()
        if np.isclose(np.sum(sample_weights), 0):
            sample_weights = np.ones_like(sample_weights, dtype=np.float32) / len(sample_weights)
        seed_idx = np.random.choice(range(len(self.seeds)), 1, p=sample_weights)[0]
        self._update_staleness(seed_idx)
        return int(self.seeds[seed_idx])

    def _sample_unseen_level(self):
        sample_weights = self.unseen_seed_weights / self.unseen_seed_weights.sum()
        seed_idx = np.random.choice(range(len(self.seeds)), 1, p=sample_weights)[0]
        self._update_staleness(seed_idx)
        return int(self.seeds[seed_idx])

    def sample(self):
        num_unseen = (self.unseen_seed_weights > 0).sum()
        proportion_seen = (len(self.seeds) - num_unseen) / len(self.seeds)
        if self.replay_schedule == "fixed":
            if proportion_seen >= self.rho and (np.random.rand() > self.nu or not proportion_seen < 1.0):
                return self._sample_replay_level()
            return self._sample_unseen_level()
        if proportion_seen >= self.rho and np.random.rand() < proportion_seen:
            return self._sample_replay_level()
        return self._sample_unseen_level()

    def _sample_weights(self):
        weights = self._score_transform(self.score_transform, self.temperature, self.seed_scores)
        weights = weights * (1 - self.unseen_seed_weights)
        z = np.sum(weights)
        if z > 0:
            weights /= z
        staleness_weights = 0
        if self.staleness_coef > 0:
            staleness_weights = self._score_transform(
                self.staleness_transform, self.staleness_temperature, self.seed_staleness
            )
            staleness_weights = staleness_weights * (1 - self.unseen_seed_weights)
            z = np.sum(staleness_weights)
            if z > 0:
                staleness_weights /= z
            weights = (1 - self.staleness_coef) * weights + self.staleness_coef * staleness_weights
        return weights

    def _score_transform(self, transform, temperature, scores):
        if transform == "rank":
            temp = np.flip(scores.argsort())
            ranks = np.empty_like(temp)
            ranks[temp] = np.arange(len(temp)) + 1
            return 1 / ranks ** (1.0 / temperature)
        eps = 0 if self.staleness_coef > 0 else 1e-3
        return (np.array(scores) + eps) ** (1.0 / temperature)


# --------------------------------------------------------------------------- data
def make_stream(n_levels, reps, seed=0):
    """`reps` consecutive [T, N] unrolls of continuous episode streams (time-major, float32)."""
    rng = np.random.default_rng(seed)
    total = reps * T_STEPS
    dones = rng.random((total, N_COLS)) < 0.01
    new_level = rng.integers(0, n_levels, (total + 1, N_COLS))
    ep = np.cumsum(np.vstack([np.zeros((1, N_COLS), bool), dones[:-1]]), axis=0)
    seeds = np.take_along_axis(new_level, ep, axis=0)  # constant within an episode
    adv = rng.normal(size=(total, N_COLS)).astype(np.float32)
    return [
        (
            seeds[i * T_STEPS : (i + 1) * T_STEPS],
            dones[i * T_STEPS : (i + 1) * T_STEPS],
            adv[i * T_STEPS : (i + 1) * T_STEPS],
        )
        for i in range(reps)
    ]


def to_ref(seeds, dones, adv):
    import torch

    def am(x):  # actor-major flattening, as DI-engine's train_data
        return torch.as_tensor(np.ascontiguousarray(x.T).reshape(-1))

    return {
        "seed": am(seeds),
        "done": am(dones),
        "adv": am(adv),
        "reward": am(np.zeros_like(adv)),
        "value": am(np.zeros_like(adv)),
        "logit": torch.zeros(N_COLS * T_STEPS, 4),
    }


# --------------------------------------------------------------------------- timings
def results(levels: np.ndarray, scores: np.ndarray) -> EpisodeResults:
    """`EpisodeResults` of finished episodes on `levels [E]` with `scores [E]` (1 step, return 0, unsolved)."""
    n = levels.size
    return EpisodeResults(levels.astype(np.int64), scores.astype(np.float64), np.ones(n, dtype=np.int64),
                          np.zeros(n), np.zeros(n, dtype=bool))


def unroll_results(seeds: np.ndarray, dones: np.ndarray, adv: np.ndarray) -> EpisodeResults:
    """The episodes that end in a `[T, N]` unroll, in the order they ended (step, then column), as its actors
    report them; scored |adv| of the last step."""
    t, n = np.nonzero(dones)  # row-major: by step, then column
    return results(seeds[t, n], np.abs(adv[t, n]))


def every_level_seen(n_levels: int, rng: np.random.Generator, seeds=None) -> EpisodeResults:
    """One finished episode per level (`seeds`, default 0..n-1), with random value_l1 scores in [0, 1)."""
    seeds = np.arange(n_levels) if seeds is None else np.asarray(seeds, dtype=np.int64)
    return results(seeds, rng.random(n_levels))


def time_ours_update(n_levels, reps):
    stream = make_stream(n_levels, reps + 2)
    s = LevelSampler(range(n_levels), rng=0)
    s.update_with_episodes(unroll_results(*stream[0]))  # warm-up
    s.sample()
    t_upd, t_upd_sample = [], []
    for seeds, dones, adv in stream[1 : reps + 1]:
        feedback = unroll_results(seeds, dones, adv)
        t0 = time.perf_counter()
        s.update_with_episodes(feedback)
        t1 = time.perf_counter()
        s.sample()
        t2 = time.perf_counter()
        t_upd.append(t1 - t0)
        t_upd_sample.append(t2 - t0)
    return float(np.median(t_upd)), float(np.median(t_upd_sample))


def time_ref_update(n_levels, reps):
    stream = make_stream(n_levels, reps + 1)
    r = RefLevelSampler(list(range(n_levels)), N_COLS)
    r.update_with_rollouts(to_ref(*stream[0]), N_COLS)  # warm-up (torch lazy init)
    ts = []
    for chunk in stream[1 : reps + 1]:
        data = to_ref(*chunk)
        t0 = time.perf_counter()
        r.update_with_rollouts(data, N_COLS)
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def time_ours_sample(n_levels, k):
    rng = np.random.default_rng(1)
    s = LevelSampler(range(n_levels), rng=0)
    s.update_with_episodes(every_level_seen(n_levels, rng))
    for _ in range(1000):
        s.sample()  # warm-up: builds caches, spreads staleness
    t0 = time.perf_counter()
    for _ in range(k):
        s.sample()
    return (time.perf_counter() - t0) / k


def time_ref_sample(n_levels, k):
    np.random.seed(0)
    r = RefLevelSampler(list(range(n_levels)), 1)
    r.seed_scores[:] = np.random.default_rng(1).random(n_levels)
    r.unseen_seed_weights[:] = 0
    # The reference fails on a fresh sampler here: with all staleness 0 its staleness weights are all 0,
    # are not normalised, the mixture sums to 1 - staleness_coef and np.random.choice raises.  Start it
    # with non-zero staleness, as after some sampling.
    r.seed_staleness[:] = np.random.default_rng(3).integers(1, 1000, n_levels)
    for _ in range(3):
        r.sample()
    t0 = time.perf_counter()
    for _ in range(k):
        r.sample()
    return (time.perf_counter() - t0) / k


# --------------------------------------------------------------------------- level buffer
def buffer_stream(buf: LevelBuffer, seed: int = 0):
    """Endless [T, N] unrolls of continuous episode streams whose levels `buf` draws, as the `EpisodeResults` of
    the episodes that end in each: each episode start takes `buf.draw()` (before the unroll is yielded), as an
    env does; episodes end with probability 1/100 per step and span unrolls; advantages N(0, 1)."""
    rng = np.random.default_rng(seed)
    cur = np.array([buf.draw()[0] for _ in range(N_COLS)], dtype=np.int64)  # [N] level of the open episode
    ended = np.zeros(N_COLS, dtype=bool)  # [N] the episode ended at the previous unroll's last step
    levels = np.empty((T_STEPS, N_COLS), dtype=np.int64)
    while True:
        dones = rng.random((T_STEPS, N_COLS)) < 0.01
        ep = np.cumsum(np.vstack([ended, dones[:-1]]), axis=0)  # [T, N] episodes started within this unroll
        for j in range(N_COLS):
            col = np.array([cur[j], *(buf.draw()[0] for _ in range(int(ep[-1, j])))], dtype=np.int64)
            levels[:, j] = col[ep[:, j]]
            cur[j] = col[-1]
        ended = dones[-1].copy()
        yield unroll_results(levels.copy(), dones, rng.normal(size=(T_STEPS, N_COLS)).astype(np.float32))


def time_buffer(cfg: LevelConfig, reps: int, k: int) -> dict:
    """Median seconds of an update and of the update plus the draws up to the score-CDF rebuild over `reps`
    unrolls of `buffer_stream`, on a buffer filled by that stream; then the mean seconds of one `draw()`."""
    buf = LevelBuffer(0, cfg, rng=0)
    stream = buffer_stream(buf)
    for _ in range(5):  # fill the buffer, then 5 more unrolls
        while buf.size < buf.capacity:
            buf.update_with_episodes(next(stream))
        buf.update_with_episodes(next(stream))
    before = buf.counters()
    t_upd, t_rebuild = [], []
    for _ in range(reps):
        feedback = next(stream)
        t0 = time.perf_counter()
        buf.update_with_episodes(feedback)
        t1 = time.perf_counter()
        # `_score_cache` is what update_with_episodes invalidates; the first draw that reads it rebuilds it
        while buf._score_cache is None:
            buf.draw()
        t_upd.append(t1 - t0)
        t_rebuild.append(time.perf_counter() - t0)
    after = buf.counters()
    for _ in range(1000):
        buf.draw()
    t0 = time.perf_counter()
    for _ in range(k):
        buf.draw()
    draw_s = (time.perf_counter() - t0) / k
    t0 = time.perf_counter()
    for _ in range(k // PREFETCH):
        buf.draw_many(PREFETCH)
    draw_many_s = (time.perf_counter() - t0) / (k // PREFETCH * PREFETCH)
    # per update: draws (the stream's episode starts and the rebuild draws), new or replayed; levels that entered
    per = {key: (after[key] - before[key]) / reps for key in ("num_samples", "num_replays", "num_inserted")}
    return {"buffered": buf.size, "update_s": float(np.median(t_upd)), "draw_s": draw_s, "draw_many_s": draw_many_s,
            "update_plus_rebuild_s": float(np.median(t_rebuild)), "replayed_per_update": per["num_replays"],
            "new_per_update": per["num_samples"] - per["num_replays"], "inserted_per_update": per["num_inserted"]}


def _round_trip_s(call, reps: int) -> float:
    """Median seconds of `ray.get(call())` over `reps` calls after 20 warm-up calls."""
    import ray

    for _ in range(20):
        ray.get(call())
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        ray.get(call())
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def time_ray(n_levels: int, reps: int) -> dict:
    """Round trips from the driver: `sample_seeds(n)` and `sample_levels(32)` on `n_levels` fixed levels,
    `sample_levels(n)` on a full level buffer (unbounded space, `BUFFER_CONFIGS["value_l1"]`)."""
    import ray

    from levelray.level_service.service import LevelService

    started = False
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
        started = True
    try:
        svc = LevelService.remote(list(range(n_levels)), rng=0)
        ray.get(svc.report_episodes.remote(every_level_seen(n_levels, np.random.default_rng(2))))
        out = {f"sample_seeds_{n}": _round_trip_s(lambda n=n: svc.sample_seeds.remote(n), reps) for n in (1, 32)}
        out["sample_levels_32"] = _round_trip_s(lambda: svc.sample_levels.remote(32), reps)
        ray.kill(svc)
        buf = LevelService.remote(None, BUFFER_CONFIGS["value_l1"], start_level=0, rng=0)
        seeds, _ = ray.get(buf.sample_levels.remote(BUFFER_SIZE))  # all new: the buffer is empty
        ray.get(buf.report_episodes.remote(every_level_seen(BUFFER_SIZE, np.random.default_rng(2), seeds)))
        for n in (1, 32):
            out[f"buffer_sample_levels_{n}"] = _round_trip_s(lambda n=n: buf.sample_levels.remote(n), reps)
        ray.kill(buf)
        return out
    finally:
        if started:
            ray.shutdown()


def print_results(rows: list[dict], buffer_rows: list[dict], ray_res: dict | None) -> None:
    title = (f"update: the finished episodes of {N_COLS} columns x {T_STEPS} steps (reference: their steps), value_l1; "
             "sample(): default config")
    print_table(rows, COLUMNS, title=title)
    print_table(buffer_rows, BUFFER_COLUMNS, title=f"\nLevelBuffer, {BUFFER_SIZE:,} levels, fixed schedule, "
                f"replay_prob 0.5; update: {N_COLS} x {T_STEPS} steps, half the episodes on new levels")
    if ray_res:
        us = {key: v * 1e6 for key, v in ray_res.items()}
        print(f"Ray sample_seeds (10,000 levels, driver as client): n=1 {us['sample_seeds_1']:.0f} us/call; "
              f"n=32 {us['sample_seeds_32']:.0f} us/call = {us['sample_seeds_32'] / 32:.1f} us/seed; "
              f"sample_levels n=32 {us['sample_levels_32']:.0f} us/call")
        print(f"Ray sample_levels ({BUFFER_SIZE:,}-level buffer, unbounded): n=1 {us['buffer_sample_levels_1']:.0f} "
              f"us/call; n=32 {us['buffer_sample_levels_32']:.0f} us/call = "
              f"{us['buffer_sample_levels_32'] / 32:.1f} us/level")


def main(argv=None):
    import torch

    # The reference's torch ops are tiny; one intra-op thread is its fastest and, on a shared 2-core
    # machine, keeps it from collapsing under thread oversubscription.
    torch.set_num_threads(1)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (a fast smoke run)")
    ap.add_argument("--json", default="benchmarks/out/bench_plr.json", help="where to write the results")
    ap.add_argument("--no-ray", action="store_true", help="skip the Ray round-trip measurement")
    args = ap.parse_args(argv)
    q = args.quick
    levels = (200, 10_000, 100_000)
    ref_update_reps = {200: 3, 10_000: 2, 100_000: 1} if q else {200: 10, 10_000: 5, 100_000: 2}
    ref_sample_k = {200: 300, 10_000: 100, 100_000: 20} if q else {200: 3000, 10_000: 500, 100_000: 100}
    ours_update_reps = 10 if q else 50
    ours_sample_k = 5000 if q else 50_000

    rows = []
    for n in levels:
        ou, ous = time_ours_update(n, ours_update_reps)
        ru = time_ref_update(n, ref_update_reps[n])
        osm = time_ours_sample(n, ours_sample_k)
        rsm = time_ref_sample(n, ref_sample_k[n])
        rows.append({"levels": n, "update_ours_s": ou, "update_plus_first_sample_ours_s": ous,
                     "update_reference_s": ru, "update_speedup": ru / ou, "update_speedup_incl_rebuild": ru / ous,
                     "sample_ours_s": osm, "sample_reference_s": rsm, "sample_speedup": rsm / osm})
        print(f"done {n} levels", file=sys.stderr, flush=True)
    buffer_rows = [{"strategy": name, **time_buffer(cfg, ours_update_reps, ours_sample_k)}
                   for name, cfg in BUFFER_CONFIGS.items()]
    ray_res = None if args.no_ray else time_ray(10_000, 50 if q else 300)
    print_results(rows, buffer_rows, ray_res)
    config = {"columns": N_COLS, "steps": T_STEPS, "done_prob": 0.01, "strategy": "value_l1", "quick": q,
              "ref_update_reps": ref_update_reps, "ours_update_reps": ours_update_reps,
              "ours_sample_k": ours_sample_k, "ref_sample_k": ref_sample_k,
              "buffer_configs": {name: dataclasses.asdict(cfg) for name, cfg in BUFFER_CONFIGS.items()}}
    # ray_round_trip_s: median seconds per call; sample_seeds_n and sample_levels_32 on 10,000 fixed levels,
    # buffer_sample_levels_n on a full 4,000-level buffer
    write_json(args.json, {"config": config, "rows": rows, "buffer_rows": buffer_rows, "ray_round_trip_s": ray_res},
               benchmark="bench_plr")


if __name__ == "__main__":
    main()

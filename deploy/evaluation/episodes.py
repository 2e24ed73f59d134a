"""Playing a policy's episodes in this process, and the result they add up to.

Each episode plays the next seed of its level set (`deploy.evaluation.level_sets`). Exactly `episodes` episodes are
started and every one of them is played to its end (an env that has no episode left to start idles), so
short episodes are not over-represented. Every returned seed is the level the env reported playing.

Atari (`atari:<game>`, `ALE/<Game>-v5`): returns are the game's score (unclipped), and every result has
`human_normalized_score`, `(return_mean - random) / (human - random)` with the reference scores of
`contracts.atari_scores` (None for games outside Atari-57 and for every other env). Levels do not change an
Atari game (the seed drives sticky actions and no-op starts), so the `atari` preset trains on an unbounded
set and `test` is not held out.

Success rate: procgen's `prev_level_complete` (every procgen game sets it on its win condition: the
quota of fish in BigFish, the coin in CoinRun, ...); gymnasium: `info["is_success"]` at the episode's
last step where the env defines it, else None; MiniGrid: the agent reached the goal (terminated with a
positive reward, which `families.minigrid` reports as `is_success`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from levelray.contracts.atari_scores import human_normalized_score
from levelray.contracts.config import RunConfig, is_atari
from levelray.contracts.families import ENV_FAMILIES

EPISODE_KEYS = ("returns", "lengths", "seeds", "successes")  # the per-episode lists `play_episodes` returns


def atari_game(env_id: str) -> str | None:
    """ALE's name of the game an Atari env id plays (`atari:breakout` -> `breakout`); None for other envs."""
    if not is_atari(env_id):
        return None
    return ENV_FAMILIES.load("atari").game_name(env_id)


def add_human_normalized(result: dict[str, Any], game: str | None) -> dict[str, Any]:
    """`result["human_normalized_score"]`: of its `return_mean`, None without reference scores."""
    result["human_normalized_score"] = (human_normalized_score(game, result["return_mean"])
                                        if game is not None else None)
    return result


def play_episodes(
    cfg: RunConfig, weights: dict[str, np.ndarray], seeds: np.ndarray, episodes: int, *, greedy: bool,
    num_envs: int, seed: int, encodings: dict[int, bytes] | None = None,
) -> dict[str, list]:
    """Per-episode results `{returns, lengths, seeds (played), successes}`, each `[episodes]`, episode `e`
    on `seeds[e % len(seeds)]`, with `num_envs` envs in this process. `encodings`: `{id: bytes}` of the levels
    among `seeds` that exist only as data (mazes read from files)."""
    from levelray.actors.env_vector import WithEncodings
    from levelray.actors.envs import make_env_vector
    from levelray.actors.rollout import RolloutWorker

    seeds = np.asarray(seeds, dtype=np.int64).reshape(-1)
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    if seeds.size == 0:
        raise ValueError("no seeds to evaluate on")
    K = max(1, min(int(num_envs), episodes))
    env_episode = np.full(K, -1, dtype=np.int64)  # the episode index each env is playing (-1: idle)
    started = 0

    def level_source(k: int) -> int:
        nonlocal started
        if started < episodes:
            env_episode[k] = started
            started += 1
            return int(seeds[(started - 1) % seeds.size])
        env_episode[k] = -1  # nothing left to start: an idle episode whose result is ignored
        return int(seeds[0])

    source = WithEncodings(level_source, encodings) if encodings else level_source
    vec = make_env_vector(cfg.env, K, source, seed=int(seed))
    try:
        # The actors' own policy code (NumPy or torch inference, the same sampling).
        worker = RolloutWorker(vec, 1, learner=cfg.learner, seed=int(seed))
        worker.set_weights(0, weights)
        returns = np.zeros(episodes)
        lengths = np.zeros(episodes, dtype=np.int64)
        played = np.zeros(episodes, dtype=np.int64)
        success: list[bool | None] = [None] * episodes
        ep_return = np.zeros(K)
        ep_length = np.zeros(K, dtype=np.int64)
        finished = 0
        obs = worker.observation
        while finished < episodes:
            playing = env_episode.copy()  # the env vector re-assigns envs whose episode ends in this step
            actions = worker.act(obs, greedy=greedy)[0]
            step = vec.step(actions)
            worker.observe(actions, step)  # a recurrent policy's state: reset where an episode starts
            ep_return += step.episode_rewards  # unclipped (Atari trains on clipped rewards)
            ep_length += 1
            for k in np.flatnonzero(step.terminated | step.truncated).tolist():
                e = int(playing[k])
                if e >= 0:
                    returns[e], lengths[e], played[e] = ep_return[k], ep_length[k], step.level_seeds[k]
                    success[e] = step.success.get(k)
                    finished += 1
                ep_return[k], ep_length[k] = 0.0, 0
            obs = step.obs
    finally:
        vec.close()
    return dict(zip(EPISODE_KEYS, (returns.tolist(), lengths.tolist(), played.tolist(), success), strict=True))


def merge_episodes(parts: list[dict[str, list]]) -> dict[str, list]:
    """The per-episode results of several `play_episodes` calls as one, in the order of `parts`."""
    return {key: [x for p in parts for x in p[key]] for key in EPISODE_KEYS}


def summarize(raw: dict[str, list]) -> dict[str, Any]:
    """Aggregate per-episode results (from `play_episodes`, possibly merged) into the result dict."""
    returns = np.asarray(raw["returns"], dtype=np.float64)
    known = [s for s in raw["successes"] if s is not None]
    return {
        "episodes": int(returns.size),
        "return_mean": float(returns.mean()),
        "return_median": float(np.median(returns)),
        "return_std": float(returns.std()),
        "return_min": float(returns.min()),
        "return_max": float(returns.max()),
        "length_mean": float(np.mean(raw["lengths"])),
        "success_rate": float(np.mean(known)) if known and len(known) == len(raw["successes"]) else None,
        "seeds": [int(s) for s in raw["seeds"]],
        "returns": [float(r) for r in returns],
    }


def evaluate_policy(
    cfg: RunConfig, weights: dict[str, np.ndarray], seeds: np.ndarray, episodes: int, *, greedy: bool,
    num_envs: int, seed: int, encodings: dict[int, bytes] | None = None,
) -> dict[str, Any]:
    """Play `episodes` episodes, each on the next seed of `seeds` (cycled), with `num_envs` envs in this
    process (`encodings`: as `play_episodes` takes them); returns {episodes, return_mean, return_median,
    return_std, return_min, return_max, length_mean, success_rate (None where the env defines no success), seeds
    (played), returns}."""
    raw = play_episodes(cfg, weights, seeds, episodes, greedy=greedy, num_envs=num_envs, seed=seed,
                        encodings=encodings)
    return summarize(raw)

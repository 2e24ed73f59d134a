"""Does a maze agent's value know how long its episode has run? What positive value loss then ranks highest.

    python -m benchmarks.value_vs_time RUN_DIR [RUN_DIR ...] [--episodes 400] [--blocks 0-60] [--json PATH]

MiniGrid pays 1 - 0.9 t / T for reaching the goal at step t of T. A feed-forward policy sees only its 7x7 view, not
t, so its value at the step that reaches the goal can only be the mean of that reward over the episodes it
sees; an LSTM can count. Positive value loss (the mean over an episode's steps of its GAE advantages clipped at 0,
DCD's PLR score) then scores an episode solved faster than the value expects as a positive surprise, whatever its
level teaches. For each run's newest checkpoint (values in reward units, as the learner publishes them to actors)
this plays `--episodes` sampled episodes on fresh generated mazes and prints, by episode length: the value at the
goal step against the reward received there, the value at the start, and the episodes' positive value loss with
the run's discount and `levels.gae_lambda`.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np

from benchmarks.common import ROOT, print_table, write_json

LENGTH_BINS = ((1, 5), (5, 10), (10, 20), (20, 40), (40, 80), (80, 10**6))


def published_weights(ckpt: dict) -> dict[str, np.ndarray]:
    """The weights the run's learner would hand its actors (with PopArt, the value layer in reward units)."""
    from levelray.actors.envs import env_spec
    from levelray.learner.learner import Learner

    learner = Learner(env_spec(ckpt["cfg"].env), ckpt["cfg"].learner)
    learner.load_state_dict(ckpt["learner"])
    return learner.get_weights()[1]


def play(ckpt: dict, episodes: int, blocks: str, num_envs: int = 16) -> list[dict[str, np.ndarray]]:
    """`episodes` sampled episodes on fresh mazes with `blocks` walls: each its values, rewards and whether it
    reached the goal."""
    from levelray.actors.envs import make_env_vector
    from levelray.actors.rollout import RolloutWorker

    cfg = ckpt["cfg"]
    rng = np.random.default_rng(0)
    vec = make_env_vector(dataclasses.replace(cfg.env, maze_blocks=blocks), num_envs,
                          lambda k: int(rng.integers(10**9, 2**31 - 1)), seed=0)
    worker = RolloutWorker(vec, 1, learner=cfg.learner, seed=0)
    worker.set_weights(0, published_weights(ckpt))
    open_eps: list[tuple[list, list]] = [([], []) for _ in range(num_envs)]
    out: list[dict[str, np.ndarray]] = []
    obs = worker.observation
    try:
        while len(out) < episodes:
            actions, _, values = worker.act_and_value(obs)
            step = vec.step(actions)
            worker.observe(actions, step)  # an LSTM's state starts afresh with each episode
            for k in range(num_envs):
                open_eps[k][0].append(float(values[k]))
                open_eps[k][1].append(float(step.rewards[k]))
            for k in np.flatnonzero(step.terminated | step.truncated).tolist():
                v, r = open_eps[k]
                out.append({"values": np.array(v), "rewards": np.array(r), "solved": bool(step.terminated[k])})
                open_eps[k] = ([], [])
            obs = step.obs
    finally:
        vec.close()
    return out[:episodes]


def by_length(ckpt: dict, played: list[dict[str, np.ndarray]]) -> list[dict]:
    """Per bin of episode length (solved episodes), then the unsolved ones: the means the module doc lists."""
    from levelray.policy.level_scores import episode_score

    cfg = ckpt["cfg"]

    def pvl(e: dict) -> float:
        return episode_score("positive_value_loss", rewards=e["rewards"], values=e["values"],
                             discount=cfg.learner.discount, gae_lambda=cfg.levels.gae_lambda)

    groups = [(f"solved in [{lo}, {hi})" if hi < 10**6 else f"solved in >= {lo}",
               [e for e in played if e["solved"] and lo <= len(e["rewards"]) < hi]) for lo, hi in LENGTH_BINS]
    groups.append(("not solved", [e for e in played if not e["solved"]]))
    rows = []
    for name, eps in groups:
        if eps:
            rows.append({"episodes": name, "n": len(eps),
                         "value_at_goal_step": float(np.mean([e["values"][-1] for e in eps])) if eps[0]["solved"]
                         else None,
                         "reward_at_goal_step": float(np.mean([e["rewards"][-1] for e in eps])) if eps[0]["solved"]
                         else None,
                         "value_at_start": float(np.mean([e["values"][0] for e in eps])),
                         "positive_value_loss": float(np.mean([pvl(e) for e in eps]))})
    return rows


def main(argv: list[str] | None = None) -> int:
    from levelray.deploy.rundir import resolve_checkpoint

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="run directories (their newest checkpoint) or checkpoints")
    p.add_argument("--episodes", type=int, default=400)
    p.add_argument("--blocks", default="0-60", help="walls of the fresh mazes played")
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "out" / "value_vs_time.json"))
    args = p.parse_args(argv)
    results = {}
    for run in args.runs:
        ckpt = resolve_checkpoint(run)
        rows = by_length(ckpt, play(ckpt, args.episodes, args.blocks))
        lstm = ckpt["cfg"].learner.lstm_size
        print(f"\n{run}: {'LSTM-' + str(lstm) if lstm else 'feed-forward'}, {ckpt['counters']['env_steps']:,} "
              f"env steps, {args.episodes} sampled episodes on fresh {args.blocks}-wall mazes")
        print_table(rows)
        results[str(Path(run))] = {"lstm_size": lstm, "rows": rows}
    write_json(args.json, {"results": results, "episodes": args.episodes, "blocks": args.blocks},
               benchmark="value_vs_time")
    return 0


if __name__ == "__main__":
    sys.exit(main())

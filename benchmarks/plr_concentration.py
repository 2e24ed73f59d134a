"""Where PLR's replay goes on a fixed set of maze levels, and what its scores say about the levels (issue 59, section
4: why PLR's defaults lose to uniform sampling on 50-wall mazes).

    python -m benchmarks.plr_concentration RUN_DIR [--eval EVAL.json] [--json PATH]

RUN_DIR is a PLR run on a fixed maze set (`--num-levels N`), whose records carry the replay distribution P over the
set (`level_weights`, every report) and whose level service wrote its state (each level's score: the snapshot
`services/levels.msgpack` of a Ray run, else the latest checkpoint's `levels.msgpack`). EVAL.json is the output of
`levelray evaluate RUN_DIR --levels train --episodes M --json` with M a few times N, so that each training level is
played several times (episode e plays level e mod N); a maze episode's return is above 0 exactly when it reached
the goal.

Prints and writes (JSON):
- over training, at 8 records spread over the run: the share of P on the top level and on the top 10, the
  effective number of levels 1 / sum(P^2), and the share of P on levels whose goal cannot be reached (beside their
  share of the set) and the P-weighted mean shortest path of the others;
- which levels held the top of P from report to report (how many, their mean shortest path, the replayed share of
  episodes);
- at the end: the mean score of unsolvable and of solvable levels, the scores' quartiles, the 10 levels of highest P
  (seed, P, score, shortest path, success rate), and with EVAL.json the Spearman rank correlations of the score and
  of P with each level's success rate.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import yaml
from scipy.stats import spearmanr

from benchmarks.common import print_table, write_json
from levelray.contracts.snapshot import load
from levelray.deploy.report.runs import read_records
from levelray.families.maze.level import generate, maze_size, parse_blocks, shortest_path_length
from levelray.level_service.spaces import sampler_from_state

__all__ = ["concentration"]


def path_lengths(env: dict, seeds: np.ndarray) -> np.ndarray:
    """Shortest path start -> goal `[n]` of the maze levels `seeds [n]` of the run's env config; -1: unreachable."""
    width, height = maze_size(env["id"])
    blocks = parse_blocks(env.get("maze_blocks", "25"))
    lengths = [shortest_path_length(generate(int(s), width, height, blocks)) for s in seeds.tolist()]
    return np.array([-1 if n is None else n for n in lengths], dtype=np.int64)


def concentration(p: np.ndarray, unsolvable: np.ndarray, lengths: np.ndarray) -> dict[str, float]:
    """Summary of one replay distribution `p [n]` over levels with `unsolvable [n]` and `lengths [n]`."""
    top = np.sort(p)[::-1]
    solvable_mass = p[~unsolvable].sum()
    return {
        "top1_share": float(top[0]),
        "top10_share": float(top[:10].sum()),
        "effective_levels": float(1.0 / np.square(p).sum()),
        "unsolvable_share": float(p[unsolvable].sum()),
        "mean_path_weighted": float((p[~unsolvable] * lengths[~unsolvable]).sum() / solvable_mass)
        if solvable_mass > 0 else None,
    }


def top_levels_over_time(records: list[dict], seeds: np.ndarray, lengths: np.ndarray) -> dict:
    """Which levels held the top of P from report to report: how many distinct ones, the mean shortest path of the
    top level over the records (unreachable ones counted as -1: none was), the longest run at the top, and the
    share of ended episodes that were replays over the run (`levels_replay_fraction`, mean over reports)."""
    top = np.array([int(np.argmax(r["level_weights"])) for r in records])  # [R] index into the set
    changes = np.flatnonzero(np.diff(top)) + 1
    runs = np.diff(np.concatenate([[0], changes, [top.size]]))
    replay = [r["levels_replay_fraction"] for r in records if r.get("levels_replay_fraction") is not None]
    return {"distinct": int(np.unique(top).size), "mean_path": float(lengths[top].mean()),
            "longest_reports_at_top": int(runs.max()), "top_seeds": [int(s) for s in seeds[np.unique(top)]],
            "replay_fraction": round(float(np.mean(replay)), 3) if replay else None}


def levels_state(run_dir: Path) -> Path:
    """The level service's last state: its snapshot (Ray backend), else the latest checkpoint's (inline)."""
    snapshot = run_dir / "services" / "levels.msgpack"
    return snapshot if snapshot.exists() else sorted(run_dir.glob("checkpoints/ckpt-*/levels.msgpack"))[-1]


def success_by_level(eval_json: Path, seeds: np.ndarray) -> np.ndarray:
    """Each training level's success rate `[n]` (NaN where unplayed) from `levelray evaluate --json` output."""
    train = json.loads(eval_json.read_text())["results"]["train"]
    played, returns = np.asarray(train["seeds"]), np.asarray(train["returns"])
    return np.array([np.mean(returns[played == s] > 0) if (played == s).any() else np.nan for s in seeds.tolist()])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--eval", type=Path, default=None, help="levelray evaluate --json of the training levels")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    config = yaml.safe_load((args.run_dir / "config.yaml").read_text())
    env = config["env"]
    seeds = np.arange(env["start_level"], env["start_level"] + env["num_levels"], dtype=np.int64)
    lengths = path_lengths(env, seeds)
    unsolvable = lengths < 0
    records = [r for r in read_records(args.run_dir) if r.get("level_weights")]
    picks = np.unique(np.linspace(0, len(records) - 1, 8).round().astype(int))
    over_time = [{"env_steps": records[i]["env_steps"],
                  **concentration(np.asarray(records[i]["level_weights"]), unsolvable, lengths)} for i in picks]
    print(f"{args.run_dir}: {unsolvable.sum()} of {seeds.size} levels unsolvable "
          f"({unsolvable.mean():.3f} of the set)")
    print_table(over_time)
    leaders = top_levels_over_time(records, seeds, lengths)
    print(f"levels at the top of P over {len(records)} records: {leaders['distinct']}, their shortest paths "
          f"weighted by records held {leaders['mean_path']:.2f} (the solvable set's mean "
          f"{lengths[~unsolvable].mean():.2f}); replayed share of episodes {leaders['replay_fraction']}")
    view = sampler_from_state(load(levels_state(args.run_dir))).view()
    order = {int(s): i for i, s in enumerate(view.seeds.tolist())}
    at = np.array([order[int(s)] for s in seeds.tolist()])
    scores, p = view.scores[at], view.weights[at]  # [n] each, in the set's order
    success = success_by_level(args.eval, seeds) if args.eval else np.full(seeds.size, np.nan)
    top = np.argsort(-p, kind="stable")[:10]
    top_rows = [{"seed": int(seeds[i]), "P": float(p[i]), "score": float(scores[i]), "path": int(lengths[i]),
                 "success": None if np.isnan(success[i]) else float(success[i])} for i in top]
    end = {"mean_score_unsolvable": float(scores[unsolvable].mean()) if unsolvable.any() else None,
           "mean_score_solvable": float(scores[~unsolvable].mean()),
           "score_quartiles": [float(q) for q in np.percentile(scores, [0, 25, 50, 75, 100])], "top_levels": top_rows}
    known = ~np.isnan(success)
    if known.sum() > 2:
        end["spearman_score_success"] = float(spearmanr(scores[known], success[known]).statistic)
        end["spearman_p_success"] = float(spearmanr(p[known], success[known]).statistic)
        end["success_unsolvable"] = float(success[known & unsolvable].mean()) if (known & unsolvable).any() else None
        end["success_solvable"] = float(success[known & ~unsolvable].mean())
    print_table(top_rows)
    print({k: v for k, v in end.items() if k != "top_levels"})
    if args.json:
        write_json(args.json, {"run_dir": str(args.run_dir), "unsolvable_fraction": float(unsolvable.mean()),
                               "over_time": over_time, "top_over_time": leaders, "end": end},
                   benchmark="plr_concentration")


if __name__ == "__main__":
    main()

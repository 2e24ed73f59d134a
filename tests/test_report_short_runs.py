"""`levelray report` of short runs, as a new user reads the page of a small CartPole sweep: a run whose reports
all come at its last env step still draws its returns (points, not empty axes) and its arm's band (a point with
its interval); a family whose levels do not change the task (CartPole) shows no level set, level strategy or
distribution mode; an inline run's policy lag says why it is 0; steps/s are there for a run shorter than a report
interval."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from levelray.deploy.report.command import make_report

CARTPOLE = {"env": {"id": "CartPole-v1", "distribution_mode": "easy", "num_levels": 0},
            "levels": {"strategy": "random"}, "replay": {"replay_ratio": 0.0}, "backend": "inline",
            "actors": {"num_actors": 1, "envs_per_actor": 8, "unroll_length": 20}, "learner": {"batch_size": 8}}
PROCGEN = {**CARTPOLE, "env": {"id": "procgen:bigfish", "distribution_mode": "easy", "num_levels": 200},
           "levels": {"strategy": "value_l1"}, "backend": "ray"}


def write_run(path: Path, config: dict, returns: list[float], env_steps: int = 30_720, **last) -> Path:
    """A run directory whose reports all come at `env_steps` (a sweep trial that trains its budget within one
    report interval), one record per return; written before the first report had a rate (0 steps/s)."""
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(yaml.safe_dump(config))
    records = [{"time": 1.0 + i, "elapsed_s": 0.5 + i, "env_steps": env_steps, "samples_trained": env_steps,
                "env_steps_per_second": 0.0, "episode_return_mean": ret, "policy_lag_mean": 0.0,
                "learner_version": 24, "learner_loss_total": 1.5, **last} for i, ret in enumerate(returns)]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_a_small_cartpole_sweeps_page_reads_without_stumbling(tmp_path):
    arms = {arm: [write_run(tmp_path / f"{arm}-seed{seed}", CARTPOLE, [ret, ret]) for seed, ret in enumerate(rets)]
            for arm, rets in {"fast": [114.4, 97.8], "slow": [25.7, 28.1]}.items()}
    figs = make_report([p for paths in arms.values() for p in paths], tmp_path / "report", arms=arms)
    # one record's worth of returns is drawn (as points), and each arm's band as a point with its interval
    assert figs["returns"]["series"] == ["fast-seed0 train", "fast-seed1 train", "slow-seed0 train",
                                         "slow-seed1 train"]
    assert figs["losses"]["path"] is not None
    bands = figs["return_bands"]
    assert bands["path"] is not None and bands["series"] == ["fast (n=2, last reports) training levels",
                                                             "slow (n=2, last reports) training levels"]
    summary = (tmp_path / "report" / "summary.md").read_text()
    table = summary.split("\n\n")[2]
    header = table.splitlines()[0]
    # no level set, level strategy or distribution mode for CartPole, no test-return column without evaluations
    assert header == "| run | env | replay ratio | env steps | train return | steps/s | policy lag |"
    # steps/s without a report's rate: env steps over the last record's elapsed seconds (30,720 / 1.5 s)
    assert "| fast-seed0 | CartPole-v1 | off | 30,720 | 114.40 | 20,480 | 0.00 (inline) |" in table
    assert "unbounded levels" not in summary and "(easy)" not in summary and "random" not in table
    assert "an inline run's actors act with the learner's own weights" in summary
    assert "Test return" not in summary.split("\n\n")[3]  # the note explains the columns the table has
    page = (tmp_path / "report" / "index.html").read_text()
    assert "fast-seed0 (unbounded levels)" not in page and "<th>policy lag</th>" in page


def test_a_family_with_levels_keeps_its_level_set_strategy_and_mode(tmp_path):
    runs = [write_run(tmp_path / "plr", PROCGEN, [3.0, 4.0], policy_lag_mean=1.5),
            write_run(tmp_path / "dr", {**PROCGEN, "env": {**PROCGEN["env"], "num_levels": 0},
                                        "levels": {"strategy": "random"}}, [2.0]),
            write_run(tmp_path / "cp", CARTPOLE, [20.0])]
    make_report(runs, tmp_path / "report")
    table = (tmp_path / "report" / "summary.md").read_text().split("\n\n")[2].splitlines()
    assert table[0] == ("| run | env | levels | strategy | replay ratio | env steps | train return | steps/s | "
                        "policy lag |")
    assert table[2].startswith("| plr (value_l1) | procgen:bigfish (easy) | 200 | value_l1 | off |")
    assert table[2].endswith("| 1.50 |")  # a Ray run's lag as measured
    # domain randomisation over procgen's levels is a curriculum choice: named; CartPole's reset seeds are not
    assert table[3].startswith("| dr (unbounded levels) | procgen:bigfish (easy) | unbounded | random |")
    assert table[4].startswith("| cp | CartPole-v1 | — | — | off |")

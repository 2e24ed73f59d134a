"""A budget's progress at a glance: each progress line of `levelray train` shows the share of the step budget done
and the time left at the current rate, of whichever budget (env steps or trained steps) ends the run first; a
sweep's progress lines show the same for each trial."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest

from levelray.deploy.training.progress import Budget, ProgressPrinter, budget_text, duration_text


def record(t: float, env_steps: int, trained: int, rate: float = 0.0) -> dict:
    return {"time": t, "env_steps": env_steps, "samples_trained": trained, "env_steps_per_second": rate,
            "episode_return_mean": 1.0, "policy_lag_mean": 0.0, "learner_version": 1}


@pytest.mark.parametrize(("seconds", "text"), [(0.2, "<1s"), (45, "45s"), (750, "12m30s"), (11_100, "3h05m"),
                                               (370_800, "4d07h")])
def test_duration_text(seconds, text):
    assert duration_text(seconds) == text


def test_budget_text_is_the_share_done_and_the_time_left_at_the_rate():
    assert budget_text(410, 1000, 10.0) == "41%, 59s left"
    assert budget_text(410, 1000, None) == "41%" and budget_text(410, 1000, 0.0) == "41%"
    assert budget_text(1000, 1000, 10.0) == budget_text(1200, 1000, 10.0) == "100%"


def test_the_env_step_budget_with_the_rate_over_the_last_records():
    budget = Budget(100_000)
    assert budget.text(record(0, 1_000, 1_000, rate=500)) == "1%, 3m18s left"  # the record's own rate, at first
    budget.text(record(10, 6_000, 6_000))
    assert budget.text(record(20, 11_000, 11_000)) == "11%, 2m58s left"  # (11,000 - 1,000) / 20 s = 500/s
    # the rate is measured over the last 30 s only: a run that sped up shows the new rate
    budget.text(record(40, 21_000, 21_000))
    assert budget.text(record(60, 51_000, 51_000)) == "51%, 33s left"  # (51,000 - 21,000) / 20 s = 1,500/s


def test_the_budget_of_trained_steps_is_shown_where_it_ends_the_run_first():
    budget = Budget(100_000, total_trained_steps=20_000)
    budget.text(record(0, 1_000, 1_000))
    # 500 env steps/s but 200 trained/s: 17,000 trained steps left take 85 s, 94,000 env steps 188 s
    assert budget.text(record(10, 6_000, 3_000)) == "trained 15%, 1m25s left"
    other = Budget(10_000, total_trained_steps=20_000)
    other.text(record(0, 1_000, 1_000))
    assert other.text(record(10, 6_000, 3_000)) == "60%, 8s left"  # the env steps end it first here


def test_the_progress_line_carries_the_budget():
    out = io.StringIO()
    printer = ProgressPrinter(out, budget=Budget(2_000))
    printer(record(0, 500, 500, rate=100))
    printer(record(5, 1_000, 1_000, rate=100))
    first, second = out.getvalue().splitlines()
    assert first.startswith("steps        500 (25%, 15s left)  ")
    assert second.startswith("steps      1,000 (50%, 10s left)  ")


def test_a_sweeps_progress_line_shows_each_trials_share_and_time_left(capsys):
    from levelray.deploy.sweep.runner import Progress

    trial = SimpleNamespace(config={"arm": "plr", "seed": 1})
    Progress({"plr-seed1": 30_000}).on_trial_result(trial, {"env_steps": 12_000, "env_steps_per_second": 2_000,
                                                            "episode_return_mean": 5.0})
    Progress({"plr-seed1": 10_000}, "samples_trained").on_trial_result(
        trial, {"env_steps": 12_000, "samples_trained": 6_000, "env_steps_per_second": 2_000})
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "levelray sweep: plr-seed1 12,000/30,000 env steps (40%, 9s left), return 5, 2,000 steps/s"
    # trained steps come at the env-step rate times the share trained on so far: 1,000/s, 4,000 left
    assert lines[1].startswith("levelray sweep: plr-seed1 6,000/10,000 trained steps (60%, 4s left), return n/a")

"""How a run is going, for people: the stop-at-return rule and the one-line progress report, with the share of
the step budget done and the time left at the current rate (`Budget`).

On a terminal the progress line is rewritten in place (carriage return, then the line cut to the terminal's
width, then `\x1b[K` to clear what a longer earlier one left); where stdout is not a terminal (a log file, CI)
each report is a line of its own. Whatever else levelray prints while a line is open in place goes through
`end_line` first (`say` does it), so that it starts on its own line.
"""

from __future__ import annotations

import math
import shutil
import sys
from collections import deque
from typing import Any, TextIO

from levelray.contracts.config import RunConfig
from levelray.contracts.status import LearnerCoreStats

MIN_EPISODES_TO_STOP_AT_RETURN = 50  # a mean over fewer episodes is too noisy to end a run on


def reached_return(cfg: RunConfig, learner_stats: LearnerCoreStats) -> bool:
    """`stop_at_return` is met by the mean of at least `MIN_EPISODES_TO_STOP_AT_RETURN` episodes."""
    ret = learner_stats.get("episode_return_mean")
    return (
        cfg.stop_at_return is not None
        and ret is not None
        and learner_stats.get("episode_returns_window", 0) >= MIN_EPISODES_TO_STOP_AT_RETURN
        and ret >= cfg.stop_at_return
    )


def duration_text(seconds: float) -> str:
    """`<1s`, `45s`, `12m30s`, `3h05m`, `4d03h`: a time left, as precise as a glance needs."""
    s = int(round(seconds))
    if s < 1:
        return "<1s"
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 100 * 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def budget_text(done: float, total: float, rate: float | None) -> str:
    """`41%, 12m30s left`: the share of `total` that `done` is, and the time the rest takes at `rate` per second
    (left out where the rate is not known yet or is 0)."""
    share = min(max(done / total, 0.0), 1.0) if total > 0 else 1.0
    if share >= 1.0:
        return "100%"
    left = f", {duration_text((total - done) / rate)} left" if rate is not None and rate > 0 else ""
    return f"{math.floor(100 * share)}%{left}"


class Budget:
    """The run's step budget on the progress line: `total_steps` (env steps) and, where set, `total_trained_steps`
    (`samples_trained`), whichever ends the run first at the current rates; each rate is measured over the records
    of the last `WINDOW_S` seconds (steadier than one report interval, still the current rate)."""

    WINDOW_S = 30.0
    COUNTERS = (("env_steps", ""), ("samples_trained", "trained "))  # (record key, the text's prefix)

    def __init__(self, total_steps: int, total_trained_steps: int | None = None):
        self.totals = {"env_steps": total_steps, "samples_trained": total_trained_steps}
        self._seen: deque[tuple[float, int, int]] = deque()  # (time, env steps, samples trained) in the window

    def text(self, record: dict[str, Any]) -> str:
        """`41%, 12m30s left` (env steps) or `trained 41%, 12m30s left`, of the budget that ends the run first."""
        now, counts = float(record.get("time") or 0.0), {k: int(record.get(k) or 0) for k, _ in self.COUNTERS}
        while self._seen and (now - self._seen[0][0] > self.WINDOW_S or counts["env_steps"] < self._seen[0][1]):
            self._seen.popleft()  # out of the window, or counters of an earlier run (a resume re-reads them)
        first = self._seen[0] if self._seen else None
        self._seen.append((now, counts["env_steps"], counts["samples_trained"]))
        # before a second record: the record's own env-step rate, and the trained steps' share of it so far
        reported = float(record.get("env_steps_per_second") or 0.0)
        shares = {"env_steps": 1.0, "samples_trained": counts["samples_trained"] / max(counts["env_steps"], 1)}
        best: tuple[float, float, str] | None = None  # (seconds left, -share, text)
        for i, (key, prefix) in enumerate(self.COUNTERS):
            total = self.totals[key]
            if not total:
                continue
            rate = ((counts[key] - first[1 + i]) / (now - first[0]) if first and now > first[0]
                    else reported * shares[key] or None)
            left = (total - counts[key]) / rate if rate else math.inf
            candidate = (max(left, 0.0), -counts[key] / total, prefix + budget_text(counts[key], total, rate))
            best = candidate if best is None or candidate[:2] < best[:2] else best
        return best[2] if best else ""


def progress_line(record: dict[str, Any], budget: str = "") -> str:
    """One line of a `metrics.jsonl` record, with `budget` (`Budget.text`) after the steps; the actors part is left
    out where the record has no count."""
    ret = record.get("episode_return_mean")
    ret_s = f"{ret:8.2f}" if ret is not None else "     n/a"
    actors = record.get("actors_alive")
    actors_s = f"  actors {actors}/{record.get('actors_desired')}" if actors is not None else ""
    if record.get("actors_pending"):
        actors_s += f" ({record['actors_pending']} pending)"
    if record.get("test_return_mean") is not None:
        actors_s += f"  held-out return {record['test_return_mean']:.2f}"
    budget_s = f" ({budget})" if budget else ""
    return (
        f"steps {record['env_steps']:>10,d}{budget_s}  {record['env_steps_per_second']:>8,.0f}/s  return {ret_s}  "
        f"lag {record['policy_lag_mean']:5.2f}  version {record['learner_version']:>6d}{actors_s}"
    )


CLEAR_TO_END = "\x1b[K"  # ANSI "erase to end of line"
_open: list[TextIO] = []  # the stream whose in-place progress line is not ended yet (at most one)


class ProgressPrinter:
    """Prints `progress_line` of each record to `stream` (stdout by default): in place where it is a terminal
    (`isatty()`), one line per record otherwise; with `budget`, the share of it done and the time left."""

    def __init__(self, stream: TextIO | None = None, budget: Budget | None = None):
        self.stream = stream if stream is not None else sys.stdout
        self.budget = budget
        isatty = getattr(self.stream, "isatty", None)
        self.in_place = bool(isatty and isatty())

    def __call__(self, record: dict[str, Any]) -> None:
        line = progress_line(record, self.budget.text(record) if self.budget is not None else "")
        if self.in_place:
            # cut to the terminal's width: a wrapped line would leave its first rows behind at each report
            width = shutil.get_terminal_size(fallback=(200, 24)).columns
            self.stream.write("\r" + line[: max(width - 1, 1)] + CLEAR_TO_END)
            if not _open:
                _open.append(self.stream)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def end_line(stream: TextIO | None = None) -> None:
    """End an in-place progress line that is still open: a newline on `stream` (by default the line's own; a
    signal handler passes stderr, as it must not write to a stdout the interrupted code may be writing to)."""
    if _open:
        out = stream if stream is not None else _open[0]
        _open.clear()
        out.write("\n")
        out.flush()


def say(message: str, file: TextIO | None = None) -> None:
    """Print `message` on a line of its own (ending an open progress line first) and flush."""
    end_line()
    print(message, file=file if file is not None else sys.stdout, flush=True)

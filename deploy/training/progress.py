"""How a run is going, for people: the stop-at-return rule and the one-line progress report.

On a terminal the progress line is rewritten in place (carriage return, then the line cut to the terminal's
width, then `\x1b[K` to clear what a longer earlier one left); where stdout is not a terminal (a log file, CI)
each report is a line of its own. Whatever else levelray prints while a line is open in place goes through
`end_line` first (`say` does it), so that it starts on its own line.
"""

from __future__ import annotations

import shutil
import sys
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


def progress_line(record: dict[str, Any]) -> str:
    """One line of a `metrics.jsonl` record; the actors part is left out where the record has no count."""
    ret = record.get("episode_return_mean")
    ret_s = f"{ret:8.2f}" if ret is not None else "     n/a"
    actors = record.get("actors_alive")
    actors_s = f"  actors {actors}/{record.get('actors_desired')}" if actors is not None else ""
    if record.get("actors_pending"):
        actors_s += f" ({record['actors_pending']} pending)"
    if record.get("test_return_mean") is not None:
        actors_s += f"  held-out return {record['test_return_mean']:.2f}"
    return (
        f"steps {record['env_steps']:>10,d}  {record['env_steps_per_second']:>8,.0f}/s  return {ret_s}  "
        f"lag {record['policy_lag_mean']:5.2f}  version {record['learner_version']:>6d}{actors_s}"
    )


CLEAR_TO_END = "\x1b[K"  # ANSI "erase to end of line"
_open: list[TextIO] = []  # the stream whose in-place progress line is not ended yet (at most one)


class ProgressPrinter:
    """Prints `progress_line` of each record to `stream` (stdout by default): in place where it is a terminal
    (`isatty()`), one line per record otherwise."""

    def __init__(self, stream: TextIO | None = None):
        self.stream = stream if stream is not None else sys.stdout
        isatty = getattr(self.stream, "isatty", None)
        self.in_place = bool(isatty and isatty())

    def __call__(self, record: dict[str, Any]) -> None:
        line = progress_line(record)
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

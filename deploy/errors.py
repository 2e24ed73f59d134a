"""Errors the command line turns into a message and an exit code, without a traceback, and the one-line
summary of an exception that status, metrics and held-out evaluation report."""

from __future__ import annotations

import re
import sys


class JobFailed(RuntimeError):
    """The job ran and cannot go on; the message says why and what to do (its final checkpoint is written)."""


MAX_ERROR_CHARS = 500

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _clip(text: str) -> str:
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


def error_summary(exc: BaseException) -> str:
    """One line that says why an actor or a task died: the exception its constructor or `run()` raised (not
    Ray's traceback around it), or how its process ended."""
    # Only a process that imported Ray can hold a Ray exception: others do not pay for importing it.
    ray = sys.modules.get("ray")
    if (ray is not None and isinstance(exc, ray.exceptions.RayTaskError)
            and isinstance(getattr(exc, "cause", None), BaseException)):
        cause = exc.cause
        if not isinstance(cause, ray.exceptions.RayError):
            first = str(cause).strip().splitlines()
            return _clip(f"{type(cause).__name__}: {first[0] if first else ''}".rstrip(": "))
    text = _ANSI.sub("", str(exc))
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    if getattr(exc, "actor_init_failed", False) or "Traceback" in text:
        # "The actor died because of an error raised in its creation task, ...", the traceback indented,
        # and last the exception itself at the margin.
        return _clip([line for line in lines if not line[0].isspace()][-1])
    head = f"{type(exc).__name__}: {lines[0]}"
    detail = re.search(r"Worker exit type: (\w+) Worker exit detail: ([^.]*)", text)
    if detail:
        head += f" ({detail.group(1)}: {detail.group(2)})"
    return _clip(head)

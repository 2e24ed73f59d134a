"""Small helpers shared by the end-to-end tests (and tests/multinode_script.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable

# `levelray train` flags of the smallest inline run: one actor of two envs, unrolls of 8, batches of 1, no
# metrics port, a record after every update.
TINY_INLINE_RUN = ["--backend", "inline", "--num-actors", "1", "--envs-per-actor", "2", "--unroll-length", "8",
                   "--batch-size", "1", "--metrics-port", "0", "--report-interval", "0", "--quiet"]


def free_port() -> int:
    """A TCP port on the loopback address that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sweep_process(*args: str) -> subprocess.Popen:
    """`levelray sweep ARGS` in a process group of its own (to be killed whole), on the test session's Ray."""
    import ray

    address = ray.get_runtime_context().gcs_address
    return subprocess.Popen([sys.executable, "-m", "levelray.deploy.cli", "sweep", *args, "--address", address],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def gone(pid: int) -> bool:
    """Whether no process has `pid`."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def wait_for(predicate: Callable, timeout: float, what: str = "condition", interval: float = 0.25,
             detail: Callable[[], str] | None = None):
    """Poll `predicate` until it returns something truthy (returned); AssertionError after `timeout` s."""
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    extra = f"\n{detail()}" if detail is not None else ""
    raise AssertionError(f"{what}: not met within {timeout}s (last: {last!r}){extra}")


def apply_overrides(cfg, overrides: dict):
    """`cfg` with the `section__field=value` keyword overrides set (and validated) through the config's own
    `replace_paths`; the config tree is frozen, so this returns the new tree."""
    from levelray.contracts.config import replace_paths

    return replace_paths(cfg, {key.replace("__", "."): value for key, value in overrides.items()})


def cartpole_config(tmp_path, **overrides):
    """A `RunConfig` for CartPole-v1 with no metrics port and its run directory under `tmp_path`, then the
    `section__field=value` overrides (each test file's own sizes first, then the test's). On unbounded levels it
    keeps the classic-control preset's domain randomisation (no level service) unless a strategy is given."""
    from levelray.contracts.config import RunConfig, replace_paths

    cfg = replace_paths(RunConfig(), {"env.id": "CartPole-v1", "metrics_port": 0, "run_dir": str(tmp_path / "run")})
    cfg = apply_overrides(cfg, overrides)
    if cfg.env.num_levels == 0 and "levels__strategy" not in overrides:
        cfg = replace_paths(cfg, {"levels.strategy": "random"})
    return cfg


def json_output(stdout: str):
    """The JSON document a `--json` command printed (one line or indented): the first line that starts one and
    decodes. Ray's log monitor writes worker and raylet messages (e.g. "(raylet) A worker died ...") to this
    process's stdout from a background thread, and with one Ray for the whole test session they can land in
    any test's captured output, before or after the document (seen once in .ci/run)."""
    import json

    decoder = json.JSONDecoder()
    offset = 0
    for line in stdout.splitlines(keepends=True):
        if line.startswith(("{", "[")):
            try:
                return decoder.raw_decode(stdout, offset)[0]
            except json.JSONDecodeError:
                pass
        offset += len(line)
    raise AssertionError(f"no JSON document in the output: {stdout[-2000:]!r}")


def episode_results(levels, scores):
    """`contracts.levels.EpisodeResults` of finished episodes on `levels [E]` with `scores [E]` (in that order),
    each 1 step long, return 0, unsolved: what an actor reports, with only the fields the level service folds in
    chosen."""
    import numpy as np

    from levelray.contracts.levels import EpisodeResults

    levels = np.asarray(levels, dtype=np.int64).reshape(-1)
    n = levels.size
    return EpisodeResults(levels, np.asarray(scores, dtype=np.float64).reshape(-1), np.ones(n, dtype=np.int64),
                          np.zeros(n), np.zeros(n, dtype=bool))

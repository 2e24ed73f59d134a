"""Joining a Ray cluster or starting the embedded local one: what training, evaluation and the tools share."""

from __future__ import annotations

import contextlib
import logging
import os
import sys

from levelray.deploy.cluster.supervisor import NAMESPACE

# Where Ray 2.60 logs that it turned token authentication on for a new local cluster, and how that line starts.
AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"
AUTH_NOTICE = "Token authentication is enabled for this Ray cluster"


def init_ray(address: str | None, num_actors: int, *, dashboard: bool = False) -> bool:
    """Connect to `address` or start a local Ray; returns True when this process started it.

    The local Ray gets max(cores, num_actors + 1) logical CPUs: enough for the learner and `num_actors`
    one-CPU tasks or actors (held-out evaluation, `levelray evaluate`). A training job's env actors ask
    for no CPU on it (`RayJob(embedded=True)`), so scaling them up later is never refused here."""
    import ray

    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if address:
        with _own_signal_handlers():
            ray.init(address=address, namespace=NAMESPACE, log_to_driver=False)
        return False
    cpus = max(os.cpu_count() or 1, num_actors + 1)
    # address="local": a new Ray of its own, even where a `ray start` cluster runs on this machine or
    # RAY_ADDRESS is set (plain ray.init() would join that one, and refuse num_cpus for it).
    with _own_signal_handlers(), _without_auth_notice(), _own_session():
        ray.init(address="local", num_cpus=cpus, namespace=NAMESPACE, include_dashboard=dashboard,
                 dashboard_host="127.0.0.1", log_to_driver=False)
    return True


@contextlib.contextmanager
def _own_signal_handlers():
    """Keep this process's SIGTERM and SIGINT handlers through `ray.init`, which sets its own SIGTERM handler
    (`sys.exit(15)`, `ray._private.worker.init`) over the one `levelray train` installed to stop with a final
    checkpoint; re-installing them also puts them back in front of anything Ray's C++ core set."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():  # only the main thread has handlers
        yield
        return
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, handler in saved.items():
            if callable(handler):  # a Python handler someone chose; where there was none, Ray's stays
                signal.signal(signum, handler)


@contextlib.contextmanager
def _own_session():
    """Start the embedded Ray's processes in a session (and process group) of their own.

    `ray.init` starts the GCS, the raylet (which starts every worker: env actors, learner, services) and Ray's
    monitors as children in this process's group. A signal meant for `levelray train` reaches the whole group:
    Ctrl-C in a terminal (the foreground group), `timeout -s TERM` (its own group, after the command). Ray then
    died under the driver while it wrote its final checkpoint and stopped the actors (seen: the GCS gone, the
    driver waiting 60 s for it, then aborting). In their own session only the driver gets it; `ray.shutdown`
    stops them, and kernel fate-sharing (PR_SET_PDEATHSIG, set by Ray for every process it starts on Linux)
    still ends them with this process if it dies. Ray does the same on Windows (CREATE_NEW_PROCESS_GROUP in
    `ray._private.services.ConsolePopen`), where fate-sharing is also what makes it safe; where the kernel has
    none, Ray's reaper kills them by process group instead, so they stay in this one."""
    import ray._private.utils
    from ray._private import services

    popen = getattr(services, "ConsolePopen", None)
    if sys.platform == "win32" or popen is None or not ray._private.utils.detect_fate_sharing_support():
        yield
        return

    class SessionPopen(popen):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("start_new_session", True)
            super().__init__(*args, **kwargs)

    services.ConsolePopen = SessionPopen
    try:
        yield
    finally:
        services.ConsolePopen = popen


@contextlib.contextmanager
def _without_auth_notice():
    """Ray's token authentication on the embedded Ray, without Ray's notice that it turned it on.

    Ray 2.60's `ray.init()` of a new local cluster, where RAY_AUTH_MODE is unset, turns token authentication on
    (`ray._private.authentication.authentication_token_setup.enable_token_auth_by_default`: RAY_AUTH_MODE=token
    for this process and the Ray processes it starts, `~/.ray/auth_token` written if missing) and logs a
    WARNING saying so. The embedded Ray keeps it: Ray 2.60 binds the GCS, raylet and worker gRPC ports to every
    interface (`_node_ip_address="127.0.0.1"` does not change that), so without a token anyone who reaches this
    machine could run code in it. Only that one record is left out, during this `ray.init`; RAY_AUTH_MODE set
    by the user is Ray's to follow (it logs nothing then)."""
    logger = logging.getLogger(AUTH_LOGGER)

    def drop_notice(record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(AUTH_NOTICE)

    logger.addFilter(drop_notice)
    try:
        yield
    finally:
        logger.removeFilter(drop_notice)

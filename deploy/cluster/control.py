"""`levelray scale` and `levelray status`: talk to a running job through its named supervisor."""

from __future__ import annotations

import argparse
import json
import sys

import ray

from levelray.contracts.status import PUBLISHED_KEYS, STATUS_LEARNER_KEYS
from levelray.deploy.cluster.supervisor import NAMESPACE, SUPERVISOR_NAME


def connect(address: str):
    """The job's supervisor actor, or SystemExit with a message that says what is wrong."""
    try:
        if not ray.is_initialized():
            ray.init(address=address, namespace=NAMESPACE, log_to_driver=False, logging_level="ERROR")
    except ConnectionError as exc:
        raise SystemExit(f"levelray: no Ray cluster at {address!r} ({exc}); is a job running?") from None
    try:
        return ray.get_actor(SUPERVISOR_NAME, namespace=NAMESPACE)
    except ValueError:
        raise SystemExit(f"levelray: no levelray job on the Ray cluster at {address!r}") from None


STATUS_TIMEOUT_S = 30.0  # the supervisor answers within a few seconds; this only bounds a lost one


def job_status(supervisor, timeout_s: float = STATUS_TIMEOUT_S) -> dict:
    """The supervisor's `status()` plus the learner's numbers. One wait for both: a learner that does not
    answer leaves its fields None and says why in `learner_unavailable`; only a supervisor that does not
    answer is an error (SystemExit with a message, never a traceback)."""
    refs = {"status": supervisor.status.remote(), "learner": supervisor.learner_stats.remote()}
    ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
    try:
        status = ray.get(refs["status"], timeout=0)
    except ray.exceptions.GetTimeoutError:
        raise SystemExit(f"levelray: the job's supervisor did not answer within {timeout_s:g} s") from None
    except ray.exceptions.RayError as exc:
        raise SystemExit(f"levelray: the job's supervisor failed: {type(exc).__name__}: {exc}") from None
    try:
        learner = ray.get(refs["learner"], timeout=0)
    except ray.exceptions.GetTimeoutError:
        learner = {"unavailable": f"no answer within {timeout_s:g} s"}
    except ray.exceptions.RayError as exc:
        learner = {"unavailable": f"{type(exc).__name__}"}
    status.update({k: learner.get(k) for k in STATUS_LEARNER_KEYS})
    status["learner_unavailable"] = learner.get("unavailable")
    progress = status.pop("progress", {})
    status.update({key: progress.get(key) for key in PUBLISHED_KEYS if key != "time"})
    # the env family's measures of its levels (`contracts.status.published`: a maze's levels_mean_walls, ...)
    status.update({key: value for key, value in progress.items() if key.startswith("levels_")})
    return status


def cmd_scale(args: argparse.Namespace) -> int:
    supervisor = connect(args.address)
    try:
        out = ray.get(supervisor.scale.remote(args.num_actors), timeout=60)
    except ray.exceptions.RayTaskError as exc:
        raise SystemExit(f"levelray: scale failed: {exc.cause if hasattr(exc, 'cause') else exc}") from None
    except ray.exceptions.GetTimeoutError:
        raise SystemExit("levelray: the job's supervisor did not answer within 60 s; the request may still "
                         "apply: see `levelray status`") from None
    print(f"levelray: actors desired {out['actors_desired']} (before: {out.get('previous', '?')}); "
          "`levelray status` shows them start", flush=True)
    return 0


def _number(value, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def cmd_status(args: argparse.Namespace) -> int:
    status = job_status(connect(args.address))
    if args.json:
        json.dump(status, sys.stdout, indent=2, default=str)
        print()
        return 0
    ret = status.get("episode_return_mean")
    print(f"learner version {_number(status['learner_version'], 'd')}  env steps {_number(status['env_steps'], ',')}  "
          f"{status['env_steps_per_second'] or 0:,.0f} steps/s  return {ret if ret is None else round(ret, 2)}")
    if status.get("levels_buffered") is not None:
        fraction = status.get("levels_replay_fraction")
        print(f"levels buffered {status['levels_buffered']:,}  evicted {status.get('levels_evicted') or 0:,}  "
              f"replayed {'-' if fraction is None else f'{fraction:.0%}'} of recent episodes"
              + ("" if status.get("levels_edited") is None else f"  edited {status['levels_edited']:,}"))
    if status.get("levels_trained_fraction") is not None:
        print(f"trained on {status['levels_trained_fraction']:.0%} of recent env steps")
    measured = {key: value for key, value in status.items()
                if key.startswith("levels_") and key not in PUBLISHED_KEYS and value is not None}
    if measured:  # the env family's measures of the levels (a maze's walls and paths)
        print("levels " + "  ".join(f"{key.removeprefix('levels_').replace('_', ' ')} {_number(value, '.3g')}"
                                    for key, value in measured.items()))
    if status.get("learner_unavailable"):
        print(f"learner unavailable: {status['learner_unavailable']}")
    for r in status.get("learners") or []:
        print(f"  learner rank {r['rank']}  node {str(r.get('node'))[:12]}  {r.get('device')}  "
              f"{_number(r.get('threads'), 'd')} threads  version "
              f"{_number(r.get('version'), 'd')}  queue {_number(r.get('queue_depth'), 'd')}")
    counts = f"actors {status['actors_alive']}/{status['actors_desired']} alive"
    for key in ("pending", "unresponsive"):
        if status.get(f"actors_{key}"):
            counts += f", {status[f'actors_{key}']} {key}"
    print(f"{counts}  restarts {status['actor_restarts']}")
    for a in status["actors"]:
        line = f"  actor {a['id']:>4}  pid {a.get('pid')}  node {str(a.get('node'))[:12]}  {a.get('state', 'alive')}"
        print(line + (f": {a['reason']}" if a.get("reason") else ""))
    for r in status.get("respawns", []):
        print(f"  replacement for actor {r['replaces']} starts in {r['in_s']:.1f} s "
              f"(failures in a row: {r['failures']}, delay {r['delay_s']:g} s)")
    last = status.get("last_actor_error")
    if last:
        print(f"last actor error: actor {last['actor']} died {last['when']}: {last['error']}")
    if status.get("error"):
        print(f"ERROR: {status['error']}")
    return 0

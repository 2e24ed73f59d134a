"""`levelray scale` and `levelray status`: talk to a running job through its named supervisor."""

from __future__ import annotations

import argparse
import json
import sys

from levelray.deploy.supervisor import NAMESPACE, SUPERVISOR_NAME


def connect(address: str):
    """The job's supervisor actor, or SystemExit with a message that says what is wrong."""
    import ray

    try:
        if not ray.is_initialized():
            ray.init(address=address, namespace=NAMESPACE, log_to_driver=False, logging_level="ERROR")
    except ConnectionError as exc:
        raise SystemExit(f"levelray: no Ray cluster at {address!r} ({exc}); is a job running?") from None
    try:
        return ray.get_actor(SUPERVISOR_NAME, namespace=NAMESPACE)
    except ValueError:
        raise SystemExit(f"levelray: no levelray job on the Ray cluster at {address!r}") from None


def job_status(supervisor) -> dict:
    import ray

    status = ray.get(supervisor.status.remote(), timeout=30)
    learner = ray.get(supervisor.learner_stats.remote(), timeout=30)
    status.update({k: learner.get(k) for k in ("learner_version", "env_steps", "episode_return_mean",
                                                "policy_lag_mean", "queue_depth")})
    status["env_steps_per_second"] = status.pop("progress", {}).get("env_steps_per_second")
    return status


def cmd_scale(args: argparse.Namespace) -> int:
    import ray

    supervisor = connect(args.address)
    try:
        out = ray.get(supervisor.scale.remote(args.num_actors), timeout=60)
    except ray.exceptions.RayTaskError as exc:
        raise SystemExit(f"levelray: scale failed: {exc.cause if hasattr(exc, 'cause') else exc}") from None
    print(f"levelray: actors desired {out['actors_desired']} (was running {out.get('previous', '?')})")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    status = job_status(connect(args.address))
    if args.json:
        json.dump(status, sys.stdout, indent=2, default=str)
        print()
        return 0
    ret = status.get("episode_return_mean")
    print(f"learner version {status['learner_version']}  env steps {status['env_steps']:,}  "
          f"{status['env_steps_per_second'] or 0:,.0f} steps/s  return {ret if ret is None else round(ret, 2)}")
    print(f"actors {status['actors_alive']}/{status['actors_desired']} alive  restarts {status['actor_restarts']}")
    for a in status["actors"]:
        print(f"  actor {a['id']:>4}  pid {a.get('pid')}  node {str(a.get('node'))[:12]}  "
              f"{'alive' if a['alive'] else 'DEAD'}")
    return 0

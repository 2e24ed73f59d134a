"""Prometheus metrics for the whole job, served from the driver on one endpoint.

The driver polls the learner, supervisor and services every report interval and hands the merged
snapshot to `JobCollector`, which renders it at scrape time. Counters are the services' own
monotonic totals (exported as `_total`), so a restarted driver never makes them go backwards
within one process. Names follow Prometheus conventions: `levelray_` prefix, base units, `_total`
for counters.
"""

from __future__ import annotations

import errno
import socket
import threading

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from levelray.contracts.config import MODEL_LOSS_TERMS, ConfigError
from levelray.contracts.status import StatusSnapshot, actor_counts
from levelray.learner.core import LAG_BUCKETS
from levelray.replay_service.service import PRIORITY_HIST_EDGES

# name -> (type, help): the list README documents and the deploy configs may use.
METRICS = {
    "levelray_env_steps_total": ("counter", "Environment steps received by the learner"),
    "levelray_episodes_total": ("counter", "Episodes finished"),
    "levelray_episode_return": ("gauge", "Mean return of the last 100 episodes"),
    "levelray_env_steps_per_second": ("gauge", "Environment steps per second over the last report interval"),
    "levelray_learner_updates_total": ("counter", "Learner updates (the learner version)"),
    "levelray_learner_samples_total": ("counter", "Samples (steps) trained on"),
    "levelray_learner_samples_received_total": ("counter", "Env steps in the unrolls that reached the learner"),
    "levelray_learner_samples_with_gradient_total": (
        "counter", "Of those, the steps that carry gradient (Robust PLR's level windows: the replayed levels')"),
    "levelray_learner_version": ("gauge", "Current learner version"),
    "levelray_learner_loss": (
        "gauge", "Learner losses of the last update, by kind (total, policy, value; action_bound for continuous "
                 "actions, NaN otherwise)"),
    "levelray_learner_model_loss": (
        "gauge", "Model loss (--model-loss muzero) of the last update, by term (total, value, reward, policy, "
                 "game_over, consistency); NaN without it"),
    "levelray_learner_entropy": ("gauge", "Mean policy entropy of the last update"),
    "levelray_learner_grad_norm": ("gauge", "Gradient norm before clipping, last update"),
    "levelray_learner_explained_variance": ("gauge", "Explained variance of the value head, last update"),
    "levelray_learner_behaviour_kl": (
        "gauge", "Mean over the last update's trained steps of log mu(a) - log pi(a): how far the learner's policy "
                 "has moved from the behaviour policy that acted (an estimate of KL(mu || pi); 0 at policy lag 0)"),
    "levelray_learner_clip_fraction": (
        "gauge", "APPO (--algorithm appo): fraction of the last update's trained steps whose ratio pi/pi_old lay "
                 "outside 1 +- --ppo-clip, the mean over its passes (0 at the first pass); NaN under IMPALA"),
    "levelray_learner_approx_kl": (
        "gauge", "APPO: mean over the last update's passes of (r - 1) - log r, r = pi/pi_old: an estimate of how far "
                 "its passes moved the policy, KL(pi_old || pi); NaN under IMPALA"),
    "levelray_policy_lag": ("histogram", "Learner version minus the unroll's policy version, in versions"),
    "levelray_learner_queue_depth": ("gauge", "Unrolls waiting in the learner's inbound queue"),
    "levelray_trajectories_dropped_total": ("counter", "Unrolls dropped by the learner, by reason"),
    "levelray_actors_alive": ("gauge", "Env actors alive"),
    "levelray_actors_desired": ("gauge", "Env actors asked for"),
    "levelray_actors_pending": ("gauge", "Env actors not started yet: waiting for resources, or starting"),
    "levelray_actor_restarts_total": ("counter", "Env actors replaced after dying"),
    "levelray_actor_failures_total": ("counter", "Env actors that died within a minute of starting (crash loops)"),
    "levelray_actor_restart_backoff_seconds": (
        "gauge", "Longest delay before a waiting env actor replacement starts (0: none waits; 30: a crash loop)"),
    "levelray_actor_last_error": (
        "gauge", "Unix time of the last env actor death, labelled with its error (one series; error=\"\" before any)"),
    "levelray_learner_restarts_total": ("counter", "Learner restarts from the latest checkpoint"),
    "levelray_learner_nonfinite_updates_total": ("counter", "Updates skipped for a NaN/Inf loss or gradient"),
    "levelray_level_seen_fraction": ("gauge", "Fraction of training levels with a score"),
    "levelray_level_score": ("gauge", "Level score quantiles over seen levels"),
    "levelray_level_staleness": ("gauge", "Level staleness, mean and max"),
    "levelray_level_top_weight": ("gauge", "Replay probability of the 10 most likely levels, by rank and seed"),
    "levelray_levels_buffered": ("gauge", "Levels with a score that PLR replays from (a level buffer's size)"),
    "levelray_levels_evicted_total": ("counter", "Levels evicted from the level buffer by higher-scoring new ones"),
    "levelray_levels_replay_fraction": (
        "gauge", "Fraction of the episodes since the last report played on a replayed level"),
    "levelray_levels_trained_fraction": (
        "gauge", "Fraction of the env steps since the last report that the learner trained on (Robust PLR's level "
                 "windows: the replay windows' share)"),
    "levelray_levels_edited_total": ("counter", "ACCEL runs: children the level editor made from replayed levels"),
    "levelray_replay_size": ("gauge", "Unrolls in the replay buffer"),
    "levelray_service_snapshot_errors_total": ("counter", "Periodic service snapshots that failed, by service"),
    "levelray_replay_inserts_total": ("counter", "Unrolls inserted into replay"),
    "levelray_replay_samples_total": ("counter", "Unrolls sampled from replay"),
    "levelray_replay_priority": ("gauge", "Replay priorities: the maximum, and item counts per priority bin"),
    "levelray_test_return": ("gauge", "Mean return on held-out levels (periodic evaluation)"),
}


NAN = float("nan")


def _strip_total(name: str) -> str:
    return name[: -len("_total")] if name.endswith("_total") else name


def _value(v, default: float) -> float:
    return default if v is None else float(v)


def _counter(name: str, v) -> CounterMetricFamily:
    """A counter, at 0 until the job reports it."""
    return CounterMetricFamily(_strip_total(name), METRICS[name][1], value=_value(v, 0.0))


def _gauge(name: str, v) -> GaugeMetricFamily:
    """A gauge, NaN until the job reports it."""
    return GaugeMetricFamily(name, METRICS[name][1], value=_value(v, NAN))


def _labelled(name: str, label: str | list[str], items) -> GaugeMetricFamily:
    """A gauge with one series per `(label values, value)` of `items`."""
    fam = GaugeMetricFamily(name, METRICS[name][1], labels=[label] if isinstance(label, str) else label)
    for labels, v in items:
        fam.add_metric(labels, _value(v, NAN))
    return fam


def _learner_families(s: StatusSnapshot):
    learner = s.get("learner", {})
    metrics = learner.get("metrics", {})
    yield from (
        _counter("levelray_env_steps_total", learner.get("env_steps")),
        _counter("levelray_episodes_total", learner.get("episodes")),
        _gauge("levelray_episode_return", learner.get("episode_return_mean")),
        _gauge("levelray_env_steps_per_second", s.get("env_steps_per_second")),
        _counter("levelray_learner_updates_total", learner.get("learner_version")),
        _counter("levelray_learner_samples_total", learner.get("samples_trained")),
        _counter("levelray_learner_samples_received_total", learner.get("learner_samples_received")),
        _counter("levelray_learner_samples_with_gradient_total", learner.get("learner_samples_with_gradient")),
        _gauge("levelray_learner_version", learner.get("learner_version")),
        _gauge("levelray_learner_entropy", metrics.get("entropy")),
        _gauge("levelray_learner_grad_norm", metrics.get("grad_norm")),
        _gauge("levelray_learner_explained_variance", metrics.get("explained_variance")),
        _gauge("levelray_learner_behaviour_kl", metrics.get("behaviour_kl")),
        _gauge("levelray_learner_clip_fraction", metrics.get("clip_fraction")),
        _gauge("levelray_learner_approx_kl", metrics.get("approx_kl")),
        _gauge("levelray_learner_queue_depth", learner.get("queue_depth")),
        _gauge("levelray_test_return", s.get("test_return_mean")),
        _gauge("levelray_levels_replay_fraction", s.get("levels_replay_fraction")),
        _gauge("levelray_levels_trained_fraction", s.get("levels_trained_fraction")),
        _counter("levelray_learner_restarts_total", s.get("learner_restarts")),
        _counter("levelray_learner_nonfinite_updates_total", learner.get("nonfinite_updates")),
        _labelled("levelray_learner_loss", "kind",
                  [([kind], metrics.get(f"loss_{kind}")) for kind in ("total", "policy", "value", "action_bound")]),
        _labelled("levelray_learner_model_loss", "term",
                  [(["total"], metrics.get("model_loss"))]
                  + [([term], metrics.get(f"model_{term}_loss")) for term in MODEL_LOSS_TERMS]),
    )


def _actor_families(s: StatusSnapshot):
    actors = actor_counts(s)
    last_error = (s.get("supervisor") or {}).get("last_actor_error") or {}
    yield from (
        _gauge("levelray_actors_alive", actors["actors_alive"]),
        _gauge("levelray_actors_desired", actors["actors_desired"]),
        _gauge("levelray_actors_pending", actors["actors_pending"]),
        _counter("levelray_actor_restarts_total", actors["actor_restarts"]),
        _counter("levelray_actor_failures_total", actors["actor_failures"]),
        _gauge("levelray_actor_restart_backoff_seconds", actors["restart_backoff_s"]),
        _labelled("levelray_actor_last_error", "error", [([last_error.get("error") or ""], last_error.get("time"))]),
    )


def _level_families(levels: dict):
    yield from (
        _gauge("levelray_level_seen_fraction", levels.get("seen_fraction")),
        _gauge("levelray_levels_buffered", levels.get("levels_buffered")),
        _counter("levelray_levels_evicted_total", levels.get("levels_evicted")),
        _counter("levelray_levels_edited_total", levels.get("levels_edited")),
        _labelled("levelray_level_score", "quantile",
                  [([q], (levels.get("score") or {}).get(key)) for q, key in
                   (("0", "min"), ("0.25", "p25"), ("0.5", "median"), ("0.75", "p75"), ("1", "max"))]),
        _labelled("levelray_level_staleness", "stat",
                  [([key], (levels.get("staleness") or {}).get(key)) for key in ("mean", "max")]),
        _labelled("levelray_level_top_weight", ["rank", "seed"],
                  [([str(rank), str(level["seed"])], level["weight"])
                   for rank, level in enumerate(levels.get("top_levels") or [], 1)]),
    )


def _level_statistics(levels: dict):
    """One gauge `levelray_<key>` per measure of the env family's levels (`contracts.families.LevelStatistics`: a
    maze run's `levelray_levels_mean_walls`, ...), with the family's words as its help; none for a family that
    measures nothing."""
    helps = levels.get("level_statistics_help") or {}
    for key, value in (levels.get("level_statistics") or {}).items():
        yield GaugeMetricFamily(f"levelray_{key}", helps.get(key, key), value=_value(value, NAN))


def _lag_histogram(learner: dict) -> HistogramMetricFamily:
    counts = learner.get("policy_lag_counts") or [0] * (len(LAG_BUCKETS) + 1)
    cumulative, buckets = 0, []
    for bound, c in zip([*LAG_BUCKETS, float("inf")], counts, strict=True):
        cumulative += c
        buckets.append(("+Inf" if bound == float("inf") else str(float(bound)), cumulative))
    return HistogramMetricFamily("levelray_policy_lag", METRICS["levelray_policy_lag"][1],
                                 buckets=buckets, sum_value=learner.get("policy_lag_sum", 0.0))


def _dropped(learner: dict) -> CounterMetricFamily:
    dropped = CounterMetricFamily(
        "levelray_trajectories_dropped", METRICS["levelray_trajectories_dropped_total"][1], labels=["reason"]
    )
    for reason in sorted({"policy_lag", "malformed", *learner.get("dropped", {})}):
        dropped.add_metric([reason], float(learner.get("dropped", {}).get(reason, 0)))
    return dropped


def _snapshot_errors(levels: dict, replay: dict) -> CounterMetricFamily:
    fam = CounterMetricFamily(
        "levelray_service_snapshot_errors", METRICS["levelray_service_snapshot_errors_total"][1],
        labels=["service"])
    for service, stats in (("levels", levels), ("replay", replay)):
        fam.add_metric([service], float(stats.get("snapshot_errors") or 0))
    return fam


def _priorities(replay: dict) -> GaugeMetricFamily:
    prio = GaugeMetricFamily("levelray_replay_priority", METRICS["levelray_replay_priority"][1],
                             labels=["stat", "upper"])
    prio.add_metric(["max", ""], _value(replay.get("max_priority"), NAN))
    hist = replay.get("priority_hist") or {}
    counts = hist.get("counts") or [0] * (len(PRIORITY_HIST_EDGES) - 1)
    for upper, count in zip(PRIORITY_HIST_EDGES[1:], counts, strict=True):
        prio.add_metric(["items", f"{float(upper):.6g}"], float(count))
    return prio


class JobCollector:
    def __init__(self):
        self._snapshot: dict = {}
        self._lock = threading.Lock()

    def update(self, snapshot: StatusSnapshot) -> None:
        with self._lock:
            self._snapshot = dict(snapshot)

    def collect(self):
        """Every family in METRICS, from the first scrape on: counters at 0 and gauges at NaN until the
        job reports a value (Prometheus's "avoid missing metrics": absent series break `rate()` and
        alerts), labelled families with their fixed label sets."""
        with self._lock:
            s = dict(self._snapshot)
        levels = s.get("levels") or {}
        replay = s.get("replay") or {}
        yield from _learner_families(s)
        yield from _actor_families(s)
        yield from _level_families(levels)
        yield from _level_statistics(levels)
        yield from (
            _gauge("levelray_replay_size", replay.get("size")),
            _counter("levelray_replay_inserts_total", replay.get("inserts")),
            _counter("levelray_replay_samples_total", replay.get("samples")),
        )
        yield _lag_histogram(s.get("learner", {}))
        yield _dropped(s.get("learner", {}))
        yield _snapshot_errors(levels, replay)
        yield _priorities(replay)


def port_error(host: str, port: int, exc: OSError) -> ConfigError:
    """The one-line error for an endpoint that cannot be served on `host:port`, saying what to do instead."""
    if exc.errno == errno.EADDRINUSE:
        return ConfigError(f"--metrics-port {port} is in use ({host}:{port}: another levelray run, or another "
                           f"program, listens there): pass --metrics-port 0 for none, or another port")
    return ConfigError(f"--metrics-port {port} on --metrics-host {host} cannot be served ({exc.strerror or exc}): "
                       f"pass --metrics-port 0 for none, or another port or host")


def check_metrics_port(host: str, port: int) -> None:
    """Raise `port_error` when `MetricsServer(host, port)` could not bind now (port 0: no endpoint, nothing to
    check). The probe binds the way the server does (address family from `getaddrinfo`, SO_REUSEADDR as
    `http.server` sets it) and closes at once, so it fails exactly where the server would: a port another
    process listens on, a port below 1024 without the right, a host that is not this machine's."""
    if not port:
        return
    try:
        family, _type, _proto, _name, sockaddr = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(sockaddr)
    except OSError as exc:
        raise port_error(host, port, exc) from None


class MetricsServer:
    """One HTTP endpoint (`/metrics`) for the job; bound to 127.0.0.1 unless asked otherwise. A port that
    cannot be bound raises `port_error` (a `ConfigError`), not the bare OSError."""

    def __init__(self, host: str, port: int):
        self.registry = CollectorRegistry()
        self.collector = JobCollector()
        self.registry.register(self.collector)
        try:
            self.server, _thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise port_error(host, port, exc) from None
        self.port = self.server.server_port

    def update(self, snapshot: dict) -> None:
        self.collector.update(snapshot)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

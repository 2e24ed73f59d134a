"""A real Prometheus server (Debian's `prometheus`, installed by deploy/setup/install-prometheus.sh, which
`make test` runs first) scrapes a running training job with deploy/prometheus/prometheus.yml, and every
metric the Grafana dashboard and the alert rules use is in what the job exports."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from levelray.contracts.config import RunConfig, replace_paths
from levelray.deploy.rundir import RunDir
from levelray.deploy.training.driver import train
from tests.support import free_port
from tests.support import wait_for as shared_wait_for

ROOT = Path(__file__).resolve().parents[1]
PROM_DIR = ROOT / "deploy" / "prometheus"
DASHBOARD = ROOT / "deploy" / "grafana" / "levelray.json"
INSTALL_LOG = Path(os.environ.get("TMPDIR", "/tmp")) / "levelray-install-prometheus.log"
NAME = re.compile(r"\blevelray_[a-z_]+")


def prometheus_binary() -> str:
    path = shutil.which("prometheus") or ("/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None)
    if path is None:
        why = INSTALL_LOG.read_text().strip() if INSTALL_LOG.exists() else "run deploy/setup/install-prometheus.sh"
        pytest.skip(f"no prometheus binary: {why}")
    return path



def dashboard_metric_names() -> set[str]:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dash["templating"]["list"] if "definition" in v]
    return {n for e in exprs for n in NAME.findall(e)}


def rule_metric_names() -> set[str]:
    rules = yaml.safe_load((PROM_DIR / "levelray-rules.yml").read_text())
    return {n for g in rules["groups"] for r in g["rules"] for n in NAME.findall(r["expr"])}


def test_config_scrapes_the_drivers_default_endpoint():
    """prometheus.yml's levelray target is the driver's default endpoint (checked offline, no server)."""
    cfg = yaml.safe_load((PROM_DIR / "prometheus.yml").read_text())
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    defaults = RunConfig()
    assert jobs["levelray"]["static_configs"][0]["targets"] == [f"{defaults.metrics_host}:{defaults.metrics_port}"]


def job_config(tmp_path, port: int) -> RunConfig:
    """A small CartPole job with every part that exports metrics on: levels (PLR), replay, evaluation."""
    return replace_paths(RunConfig(), {
        "env.id": "CartPole-v1",
        "env.num_levels": 20,
        "actors.num_actors": 1,
        "actors.envs_per_actor": 4,
        "learner.batch_size": 2,
        "learner.learning_rate": 1e-3,  # 2e-3 sometimes collapses the policy at ~3 versions of lag
        "replay.replay_ratio": 0.5,
        "replay.min_size": 2,
        "eval.interval_updates": 20,
        "eval.episodes": 2,
        "eval.num_envs": 2,
        "total_steps": 10**9,
        "metrics_port": port,
        "report_interval_s": 0.5,
        "run_dir": str(tmp_path / "run"),
    })


@pytest.mark.timeout(240)
def test_real_prometheus_scrapes_a_training_job(ray_session, tmp_path):
    binary = prometheus_binary()
    metrics_port, prom_port = free_port(), free_port()

    # deploy/prometheus/prometheus.yml with this test's port, a 1 s scrape interval, absolute rule paths,
    # and Ray's service-discovery file replaced by an empty one (the test session's Ray is no target).
    config = yaml.safe_load((PROM_DIR / "prometheus.yml").read_text())
    config["global"].update(scrape_interval="1s", evaluation_interval="1s")
    config["rule_files"] = [str(PROM_DIR / f) for f in config["rule_files"]]
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    jobs["levelray"]["static_configs"][0]["targets"] = [f"127.0.0.1:{metrics_port}"]
    sd_file = tmp_path / "ray_sd.json"
    sd_file.write_text("[]")
    jobs["ray"]["file_sd_configs"][0]["files"] = [str(sd_file)]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))

    cfg = job_config(tmp_path, metrics_port)
    stop = threading.Event()
    errors: list[BaseException] = []

    def run_job():
        try:
            train(cfg, RunDir(cfg.run_dir), stop=stop, quiet=True)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    log = (tmp_path / "prometheus.log").open("w")
    prom = subprocess.Popen(
        [binary, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prom_port}", "--storage.tsdb.retention.time=1h"],
        stdout=log, stderr=subprocess.STDOUT, cwd=tempfile.gettempdir())
    thread = threading.Thread(target=run_job, daemon=True)
    thread.start()
    api = f"http://127.0.0.1:{prom_port}/api/v1"

    def get(path: str, **params) -> dict:
        url = f"{api}/{path}" + ("?" + urllib.parse.urlencode(params) if params else "")
        with urllib.request.urlopen(url, timeout=5) as r:
            body = json.loads(r.read().decode())
        assert body["status"] == "success", body
        return body["data"]

    def steps() -> float | None:
        assert prom.poll() is None, (tmp_path / "prometheus.log").read_text()
        assert not errors, errors
        try:
            result = get("query", query="levelray_env_steps_total")["result"]
        except OSError:
            return None
        return float(result[0]["value"][1]) if result else None

    def wait_for(predicate, timeout: float, what: str):
        return shared_wait_for(predicate, timeout, what, interval=0.5,
                               detail=lambda: (tmp_path / "prometheus.log").read_text()[-3000:])

    try:
        first = wait_for(lambda: (v := steps()) is not None and v > 0 and v, 120,
                         "Prometheus' query API returns levelray_env_steps_total > 0")
        second = wait_for(lambda: (v := steps()) is not None and v > first and v, 30,
                          "levelray_env_steps_total increases")
        assert second > first

        targets = get("targets")["activeTargets"]
        levelray = [t for t in targets if t["labels"]["job"] == "levelray"]
        assert levelray and levelray[0]["health"] == "up", levelray
        groups = get("rules")["groups"]
        rules = [r for g in groups for r in g["rules"]]
        assert rules and all(r["health"] in ("ok", "unknown") for r in rules), rules

        # Every metric a dashboard panel or an alert rule uses is in a live scrape of the job's endpoint.
        wanted = dashboard_metric_names() | rule_metric_names()

        def exported() -> set[str]:
            text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
            return {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}

        deadline = time.time() + 60  # level, replay and evaluation metrics appear after their first report
        while not wanted <= (live := exported()) and time.time() < deadline:
            time.sleep(0.5)
        assert wanted <= live, f"used by the dashboard or rules but not exported by the job: {sorted(wanted - live)}"
        # ... and Prometheus stored them (a query by name returns series).
        for name in ("levelray_actors_alive", "levelray_policy_lag_bucket", "levelray_level_seen_fraction",
                     "levelray_replay_size"):
            assert get("query", query=name)["result"], name
    finally:
        stop.set()
        thread.join(timeout=120)
        prom.terminate()
        try:
            prom.wait(timeout=20)
        except subprocess.TimeoutExpired:
            prom.kill()
        log.close()
    assert not thread.is_alive()
    assert not errors, errors


def _exposition(snapshot: dict) -> dict[str, list]:
    from prometheus_client import CollectorRegistry, generate_latest

    from levelray.deploy.monitoring.metrics import JobCollector

    registry = CollectorRegistry()
    collector = JobCollector()
    registry.register(collector)
    collector.update(snapshot)
    families = text_string_to_metric_families(generate_latest(registry).decode())
    return {fam.name: fam.samples for fam in families}


def test_every_family_the_dashboard_and_rules_use_is_exported_before_the_first_report():
    """Before the job has reported anything: counters 0, gauges NaN, fixed label sets — never absent."""
    from levelray.deploy.monitoring.metrics import METRICS

    exported = _exposition({})
    names = {n if n in METRICS else n + "_total" for n in exported}  # the parser strips _total off counters
    assert set(METRICS) <= names
    assert (dashboard_metric_names() | rule_metric_names()) & set(METRICS) <= names
    assert [s.value for s in exported["levelray_env_steps"]] == [0.0]
    assert all(s.value != s.value for s in exported["levelray_episode_return"])  # NaN
    assert {s.labels["kind"] for s in exported["levelray_learner_loss"]} == {"total", "policy", "value", "action_bound"}


def test_actor_failures_are_exported_with_one_fixed_series_each():
    """The supervisor's crash-loop view: before any actor died the last-error series exists with error=""; after,
    the same single series carries the error and the time it happened."""
    before = _exposition({})
    assert [(s.labels, s.value != s.value) for s in before["levelray_actor_last_error"]] == [({"error": ""}, True)]
    assert [s.value for s in before["levelray_actor_failures"]] == [0.0]
    sup = {"actors_alive": 1, "actors_desired": 2, "actors_pending": 1, "actor_restarts": 3, "actor_failures": 2,
           "restart_backoff_s": 1.0,
           "last_actor_error": {"time": 1700000000.5, "actor": 4, "when": "at start",
                                "error": "ValueError: unknown environment id 'Foo-v0'"}}
    after = _exposition({"supervisor": sup})
    assert [(s.labels, s.value) for s in after["levelray_actor_last_error"]] == [
        ({"error": "ValueError: unknown environment id 'Foo-v0'"}, 1700000000.5)]
    assert [s.value for s in after["levelray_actor_failures"]] == [2.0]
    assert [s.value for s in after["levelray_actor_restart_backoff_seconds"]] == [1.0]
    assert [s.value for s in after["levelray_actors_pending"]] == [1.0]


def test_replay_priority_bins_are_the_same_series_whatever_the_priorities():
    from levelray.contracts.config import ReplayConfig
    from levelray.replay_service.service import ReplayServiceCore

    def bins(priorities):
        core = ReplayServiceCore(ReplayConfig(capacity=16, max_use=None, min_size=1), seed=0)
        core.insert(list(range(len(priorities))), np.asarray(priorities))
        samples = _exposition({"replay": core.stats()})["levelray_replay_priority"]
        return sorted(s.labels["upper"] for s in samples if s.labels["stat"] == "items")

    assert bins([0.01, 0.02]) == bins([3.0, 900.0, 1e5])


def test_the_learners_step_counters_are_exported_as_its_stats_count_them():
    """Each step counter carries the learner's own count, so `rate(with_gradient) / rate(env_steps)` is the share of
    env steps trained on over any window (under Robust PLR's level windows, below 1)."""
    counts = {"env_steps": 1200, "learner_samples_received": 1150, "learner_samples_with_gradient": 560,
              "samples_trained": 512, "episodes": 37}
    exported = _exposition({"learner": counts})
    names = {"levelray_env_steps": "env_steps", "levelray_learner_samples_received": "learner_samples_received",
             "levelray_learner_samples_with_gradient": "learner_samples_with_gradient",
             "levelray_learner_samples": "samples_trained", "levelray_episodes": "episodes"}
    assert {family: [s.value for s in exported[family] if s.name.endswith("_total")] for family in names} == {
        family: [float(counts[key])] for family, key in names.items()}

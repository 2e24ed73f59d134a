"""Weights & Biases (`--wandb`, a sweep spec's `wandb:`), read back with W&B's own reader of offline run files
(`wandb leet inspect --json`: wandb-core reading a run's `.wandb` transaction log).

Every run here is offline with no credentials (HOME a fresh directory, no WANDB_API_KEY), with W&B's server
pointed at a local socket that counts connections: none may come (nothing reaches the network), and nothing may
be written into the working directory (W&B's files go under the run directory). An inline run logs its config,
every metrics record under its keys against env steps, a held-out video and its final checkpoint's path, and its
resume continues the same W&B run; the Ray backend logs the same way; a sweep logs one W&B run per trial, grouped
by the sweep with the arm and seed as config and tags and the trial's evaluation in its summary, and its results
tables once; bad settings and a missing extra are refused before anything starts."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from support import cartpole_config

from levelray.deploy.cli import main
from levelray.deploy.monitoring.tensorboard import scalars
from levelray.deploy.rundir import RunDir

# one actor of 4 CartPole envs, a batch of one 20-step unroll (80 env steps an update), a report every 0.2 s
TINY = ["--env", "CartPole-v1", "--backend", "inline", "--num-actors", "1", "--envs-per-actor", "4",
        "--unroll-length", "20", "--batch-size", "1", "--metrics-port", "0", "--report-interval", "0.2",
        "--tensorboard", "false"]
WANDB_ROW_KEYS = ("_runtime", "_step", "_timestamp")  # what W&B adds to every history row


class CountingServer:
    """A local TCP socket that counts the connections made to it (W&B's server URL points here)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """W&B offline, without credentials, its server a counting socket, in an empty working directory; checks
    afterwards that no connection came and nothing was written into the working directory."""
    server = CountingServer()
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    for name in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "NETRC", "WANDB_DIR", "WANDB_DATA_DIR",
                 "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("WANDB_BASE_URL", server.url)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_ERROR_REPORTING", "false")
    monkeypatch.chdir(cwd)
    yield server
    server.sock.close()
    assert server.connections == 0, "W&B connected to its server"
    assert not list(cwd.iterdir()), f"written into the working directory: {list(cwd.iterdir())}"
    for name in ("WANDB_DATA_DIR", "WANDB_CACHE_DIR"):  # pointed into the run directory only while W&B ran
        assert name not in os.environ


def inspect(path: Path) -> list[dict]:
    """The records of a `.wandb` file, as W&B's own reader gives them."""
    out = subprocess.run([str(Path(sys.executable).parent / "wandb"), "leet", "inspect", "--json", str(path)],
                         capture_output=True, text=True, timeout=120, check=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def wandb_runs(directory: Path) -> list[dict]:
    """Each offline W&B run under `directory/wandb/`, oldest first: {run (the run record), history (rows),
    summary (the last value of each key), files (the run's files folder)}."""
    out = []
    for path in sorted((directory / "wandb").glob("offline-run-*/run-*.wandb"), key=started):
        records = inspect(path)
        summary: dict = {}
        for r in records:
            if r["type"] == "summary":
                summary.update(nested(r["summary"].get("update", {})))
        runs = [r["run"] for r in records if r["type"] == "run"]
        assert runs, f"{path} holds no run record: {[r['type'] for r in records]}"
        out.append({"run": runs[0],
                    "history": [nested(r["history"]["item"]) for r in records if r["type"] == "history"],
                    "summary": summary, "files": path.parent / "files"})
    return out


def started(path: Path) -> tuple[str, int]:
    """The order W&B started the run of `path` (`offline-run-<second>-<id>[-<n>]/run-<id>.wandb`): its start
    second, then the suffix W&B gives a run of the same id started within the same second (sorting the names
    would put `<id>-1/` before `<id>/`)."""
    _, _, second, rest = path.parent.name.split("-", 3)
    run_id = path.stem.removeprefix("run-")
    suffix = rest.removeprefix(run_id).lstrip("-")
    return second, int(suffix or 0)


def nested(row: dict) -> dict:
    """A history row or summary with the reader's dotted keys regrouped one level: it writes a video's fields as
    `test_video.path`, ... (a record's own keys have no dots: nested ones are flattened with `/`)."""
    out: dict = {}
    for key, value in row.items():
        head, dot, field = key.partition(".")
        if dot:
            out.setdefault(head, {})[field] = value
        else:
            out[key] = value
    return out


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def assert_rows_are_the_records(rows: list[dict], records: list[dict]) -> None:
    """Each history row holds its record's numbers under the record's flattened keys (all but the wall clock)."""
    assert len(rows) == len(records)
    for row, record in zip(rows, records, strict=True):
        expected = {k: v for k, v in scalars(record).items() if k != "time"}
        numbers = {k: v for k, v in row.items() if k not in WANDB_ROW_KEYS and not isinstance(v, dict | list)}
        assert set(numbers) == set(expected), set(numbers) ^ set(expected)
        assert all(math.isclose(numbers[k], v, rel_tol=1e-9, abs_tol=1e-12) for k, v in expected.items())


@pytest.mark.timeout(240)
def test_an_inline_run_logs_records_video_and_checkpoint_and_its_resume_continues_the_same_wandb_run(
        offline, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", *TINY, "--total-steps", "2000", "--eval-interval", "10", "--eval-episodes", "2",
                 "--video-interval", "1", "--wandb", "--wandb-project", "levelray-test", "--wandb-tags",
                 "cartpole,smoke", "--run-dir", str(run)]) == 0
    out = capsys.readouterr().out
    assert out.count("no W&B credentials") == 1 and f"wandb sync {run}/wandb/offline-run-*" in out
    first_records = metrics(run)
    assert first_records[0]["env_steps_per_second"] > 0  # the first report's rate counts from the run's start
    assert main(["train", "--resume", str(run), "--total-steps", "3000"]) == 0
    records = metrics(run)

    first, resumed = wandb_runs(run)
    run_id = RunDir(run).run_id
    assert first["run"]["run_id"] == resumed["run"]["run_id"] == run_id  # one W&B run: the run directory's id
    assert resumed["run"]["resume"]  # W&B continues the run with that id (online: appends to it)
    for logged in (first, resumed):
        info = logged["run"]
        assert info["project"] == "levelray-test" and info["tags"] == ["cartpole", "smoke"]
        assert info["display_name"] == "run"
        config = info["config"]["update"]
        assert config["env"]["id"] == "CartPole-v1" and config["wandb"]["enabled"] is True
        assert config["levelray"] == {"run_dir": str(run.resolve()), "run_id": run_id}
    # every record, under its own keys, against env steps; the resume's rows come after the first run's
    assert_rows_are_the_records(first["history"], first_records)
    assert_rows_are_the_records(resumed["history"], records[len(first_records):])
    assert min(r["env_steps"] for r in resumed["history"]) > max(r["env_steps"] for r in first["history"])
    # the held-out evaluations, with their videos as W&B videos (the MP4 copied into the W&B run's files)
    videos = [row["test_video"] for row in first["history"] if "test_video" in row]
    assert videos and all(v["_type"] == "video-file" for v in videos)
    assert all((first["files"] / v["path"]).stat().st_size > 0 for v in videos)
    assert any("test_return_mean" in row for row in first["history"])
    checkpoints = RunDir(run).list_checkpoints()
    assert first["summary"]["final_checkpoint"] != resumed["summary"]["final_checkpoint"] == str(checkpoints[-1])
    assert resumed["summary"]["env_steps"] == records[-1]["env_steps"]

    # the report copies the run's videos once: not W&B's copies of them under RUN_DIR/wandb/
    from levelray.deploy.report.html import collect_videos
    from levelray.deploy.report.runs import label_runs, load_run

    runs = [load_run(run)]
    label_runs(runs)
    assert len(collect_videos(runs, tmp_path / "report")) == len(list((run / "videos").glob("*.mp4")))


@pytest.mark.timeout(240)
def test_a_ray_backend_run_logs_every_record_to_wandb(ray_session, offline, tmp_path):
    from levelray.deploy.training.driver import train

    cfg = cartpole_config(tmp_path, backend="ray", total_steps=3000, env__num_levels=0, actors__num_actors=1,
                          actors__envs_per_actor=4, learner__batch_size=2, report_interval_s=0.5,
                          tensorboard=False, wandb__enabled=True, wandb__mode="offline", wandb__group="ray-test")
    run_dir = RunDir.start(cfg.run_dir)
    record = train(cfg, run_dir, quiet=True)
    (logged,) = wandb_runs(run_dir.path)
    assert logged["run"]["run_group"] == "ray-test" and logged["run"]["config"]["update"]["backend"] == "ray"
    assert_rows_are_the_records(logged["history"], metrics(run_dir.path))
    assert logged["summary"]["learner_version"] == record["learner_version"]
    assert logged["summary"]["final_checkpoint"] == str(run_dir.list_checkpoints()[-1])


@pytest.mark.timeout(300)
def test_a_sweep_logs_a_wandb_run_per_trial_grouped_by_the_sweep_and_its_results_once(ray_session, offline,
                                                                                      tmp_path, capsys):
    spec = {"base": {"env": {"id": "CartPole-v1"}, "total_steps": 1000, "report_interval_s": 0.2,
                     "tensorboard": False, "actors": {"num_actors": 1, "envs_per_actor": 4}},
            "arms": {"fast": {"learner": {"learning_rate": 0.003}}, "slow": {}}, "baseline": "slow", "seeds": [0],
            "evaluate": {"levels": "test", "episodes": 2},
            # offline in the spec: the trials' processes have the environment of the session's Ray, not this one
            "wandb": {"project": "levelray-test", "tags": ["sweep-test"], "mode": "offline"}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    sweep = tmp_path / "sweep"
    assert main(["sweep", str(tmp_path / "spec.yaml"), "--dir", str(sweep)]) == 0
    assert "W&B: one run per trial in project levelray-test, group sweep, offline" in capsys.readouterr().out
    assert yaml.safe_load((sweep / "sweep.yaml").read_text())["wandb"]["group"] == "sweep"  # a resume keeps it
    results = json.loads((sweep / "results.json").read_text())
    for trial in results["trials"]:
        path = sweep / "trials" / trial["name"]
        training, evaluation = wandb_runs(path)  # the evaluation continued the run the training logged
        for logged in (training, evaluation):
            info = logged["run"]
            assert info["run_id"] == RunDir(path).run_id and info["run_group"] == "sweep"
            assert info["tags"] == ["sweep-test", trial["arm"], "seed0"]
            config = info["config"]["update"]
            assert (config["arm"], config["seed"], config["sweep"]) == (trial["arm"], 0, "spec")
        assert_rows_are_the_records(training["history"], metrics(path))
        # the evaluation's metrics (`test.return_mean`, which W&B reads as `return_mean` under `test`)
        assert evaluation["summary"]["test"]["return_mean"] == trial["metrics"]["test.return_mean"]

    (logged,) = wandb_runs(sweep)
    assert logged["run"]["run_group"] == "sweep" and logged["run"]["display_name"] == "sweep-results"
    tables = {key: json.loads((logged["files"] / logged["summary"][key]["path"]).read_text())
              for key in ("arms", "paired", "trials")}
    arms = {(arm, metric): (mean, n) for arm, metric, mean, _ci, n in tables["arms"]["data"]}
    for arm, stats in results["arms"].items():
        for metric, value in stats.items():
            assert arms[arm, metric] == (value["mean"], value["n"])
    assert {row[0] for row in tables["paired"]["data"]} == {"fast"}
    assert {row[0] for row in tables["trials"]["data"]} == {"fast-seed0", "slow-seed0"}


@pytest.mark.parametrize(("flags", "named"), [
    (["--wandb-project", "team/project"], "wandb.project: expected a name of 1 to 128 characters without any of"),
    (["--wandb-entity", "a:b"], "wandb.entity"),
    (["--wandb-mode", "sometimes"], "wandb.mode: expected one of online, offline, disabled"),
    (["--wandb-tags", "ok," + "x" * 65], "wandb.tags: expected comma-separated tags of 1 to 64 characters"),
])
def test_bad_wandb_settings_are_refused_naming_the_key_and_the_form(tmp_path, capsys, flags, named):
    with pytest.raises(SystemExit) as exc:
        main(["train", *TINY, "--wandb", *flags, "--run-dir", str(tmp_path / "run")])
    assert exc.value.code == 2 and named in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("change", "named"), [
    ({"wandb": {"projct": "x"}}, "unknown key wandb.projct; its keys are project, entity, group, tags, mode"),
    ({"wandb": {"project": "a#b"}}, "wandb.project: expected a name"),
    ({"wandb": "yes"}, "wandb must be a mapping"),
    ({"base": {"wandb": {"enabled": True}}}, "base.wandb: a sweep logs to Weights & Biases with the spec's own"),
])
def test_a_sweep_specs_bad_wandb_key_is_refused_naming_it(change, named):
    from levelray.contracts.config import ConfigError
    from levelray.deploy.sweep.spec import load_spec

    spec = {"base": {"env": {"id": "CartPole-v1"}}, "arms": {"a": {}}, "baseline": "a", "seeds": [0],
            "evaluate": {"levels": "test", "episodes": 2}, **change}
    with pytest.raises(ConfigError, match=named.replace("(", r"\(")):
        load_spec(spec)


def test_without_the_extra_wandb_is_refused_naming_it(monkeypatch, tmp_path, capsys):
    from levelray.contracts.config import ConfigError
    from levelray.deploy.sweep.spec import load_spec

    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError, as where it is missing
    with pytest.raises(SystemExit) as exc:
        main(["train", *TINY, "--wandb", "--run-dir", str(tmp_path / "run")])
    assert exc.value.code == 2 and "pip install 'levelray[wandb]'" in capsys.readouterr().err
    assert not (tmp_path / "run" / "config.yaml").exists()
    spec = {"arms": {"a": {}}, "baseline": "a", "seeds": [0], "evaluate": {"levels": "test", "episodes": 2},
            "wandb": {}}
    with pytest.raises(ConfigError, match=r"sweep spec: wandb needs the wandb package.*levelray\[wandb\]"):
        load_spec(spec)


def test_overwrite_clears_the_earlier_runs_wandb_files_and_starts_a_new_wandb_run(tmp_path):
    earlier = RunDir.start(tmp_path / "run")
    earlier_id = earlier.run_id
    (earlier.path / "wandb" / "offline-run-x").mkdir(parents=True)
    with pytest.raises(ValueError, match="wandb"):  # W&B's files are part of the earlier run
        RunDir.start(tmp_path / "run")
    again = RunDir.start(tmp_path / "run", overwrite=True)
    assert not (again.path / "wandb").exists() and again.run_id != earlier_id  # the W&B run's id


@pytest.mark.timeout(180)
def test_a_plr_runs_level_galleries_go_to_wandb_when_it_ends(offline, tmp_path):
    # a CartPole level buffer of 8 levels, scored within 640 steps, with checkpoints for the earlier galleries
    run = tmp_path / "run"
    assert main(["train", *TINY, "--envs-per-actor", "2", "--unroll-length", "8", "--batch-size", "2",
                 "--num-levels", "0", "--level-strategy", "value_l1", "--level-buffer-size", "8", "--level-window",
                 "0", "--total-steps", "640", "--checkpoint-interval", "8", "--quiet", "--wandb", "--run-dir",
                 str(run)]) == 0
    (logged,) = wandb_runs(run)
    (row,) = [row for row in logged["history"] if "level_gallery" in row]
    gallery = row["level_gallery"]
    drawn = sorted(p.name for p in (run / "wandb" / "level_gallery").glob("*.png"))
    assert gallery["_type"] == "images/separated" and sorted(gallery["captions"]) == drawn and len(drawn) >= 2
    assert all((logged["files"] / name).stat().st_size > 0 for name in gallery["filenames"])
    assert row["env_steps"] == metrics(run)[-1]["env_steps"]

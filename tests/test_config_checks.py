"""Checks of the whole config before anything starts (`contracts.validate`): each problem is
refused with the dotted names of its fields, by the real command line with exit code 2, no traceback and no
run directory, and by `levelray.train` with a `ConfigError`.

No GPU exists on this machine or in CI: the tests that need one MOCK torch's CUDA probe or Ray's view of the
cluster, and the CLI tests hide any real GPU (CUDA_VISIBLE_DEVICES="") so they mean the same everywhere."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest
import torch
import yaml

from levelray.contracts.config import ConfigError, ReplayConfig, RunConfig
from levelray.contracts.validate import validate
from levelray.deploy.cli import main
from levelray.learner.replay_feed import ReplayFeed

BASE = ["--env", "CartPole-v1", "--metrics-port", "0", "--quiet"]


def cli(tmp_path, *argv: str) -> subprocess.CompletedProcess:
    """`levelray train` in a fresh interpreter, from an empty working directory under tmp_path."""
    work = tmp_path / "cwd"
    work.mkdir()
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, "-m", "levelray.deploy.cli", "train", *BASE, *argv,
                           "--run-dir", str(tmp_path / "run")],
                          cwd=work, env=env, capture_output=True, text=True, timeout=120)


# (flags, dotted names the message must hold): one row per check
REFUSED = [
    (["--replay-ratio", "0.5", "--batch-size", "3"], ["replay.replay_ratio", "learner.batch_size"]),
    (["--replay-ratio", "0.5", "--replay-min-size", "100", "--replay-capacity", "50"],
     ["replay.min_size", "replay.capacity"]),
    (["--backend", "inline", "--device", "cuda"], ["learner.device"]),  # no GPU (hidden, if there is one)
    (["--device", "cuda:1"], ["learner.device", "backend"]),  # Ray's learner actor sees only cuda:0
    (["--device", "gpu"], ["learner.device"]),
    (["--clip-rho", "-1"], ["learner.clip_rho"]),
    (["--clip-c", "-0.5"], ["learner.clip_c"]),
    (["--clip-pg-rho", "0"], ["learner.clip_pg_rho"]),
    (["--grad-clip", "0"], ["learner.grad_clip", "learner.grad_clip_type"]),
    (["--report-interval", "0.05"], ["report_interval_s", "backend"]),
    (["--level-snapshot-interval", "0.5"], ["levels.snapshot_interval_s"]),
    (["--replay-snapshot-interval", "0"], ["replay.snapshot_interval_s"]),
    (["--replay-max-use", "0"], ["replay.max_use"]),
    (["--level-robust", "--level-strategy", "sequential"], ["levels.robust", "levels.strategy"]),
]


@pytest.mark.timeout(150)
@pytest.mark.parametrize("argv, names", REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_cli_refuses_with_the_dotted_names_and_starts_nothing(tmp_path, argv, names):
    proc = cli(tmp_path, *argv)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("levelray: error: "), proc.stderr
    for name in names:
        assert name in proc.stderr, (name, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (tmp_path / "run").exists()
    assert list((tmp_path / "cwd").iterdir()) == []  # nothing written anywhere else either


@pytest.mark.timeout(150)
def test_cli_checks_a_yaml_config_and_names_every_problem_at_once(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"learner": {"batch_size": 1, "clip_rho": 0.0, "device": "tpu"},
                                    "replay": {"replay_ratio": 0.5}}))
    proc = cli(tmp_path, "--config", str(path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "3 problems in the config" in proc.stderr
    for name in ("replay.replay_ratio", "learner.batch_size", "learner.clip_rho", "learner.device"):
        assert name in proc.stderr
    assert not (tmp_path / "run").exists()


# -- validate() itself --------------------------------------------------------------------------------------


def cfg_with(cfg: RunConfig | None = None, **paths) -> RunConfig:
    """`cfg` (default: `RunConfig()`) with the `section__field=value` paths set as they are, unchecked: the
    checks under test are `validate`'s, not `replace_paths`'s coercion."""
    cfg = RunConfig() if cfg is None else cfg
    for path, value in paths.items():
        cfg = _with_leaf(cfg, path.split("__"), value)
    return cfg


def _with_leaf(section, parts: list[str], value):
    head, *rest = parts
    return dataclasses.replace(section, **{head: _with_leaf(getattr(section, head), rest, value) if rest else value})


def test_the_default_config_passes():
    assert validate(RunConfig()) == []


@pytest.mark.parametrize("paths", [
    dict(replay__replay_ratio=0.5, learner__batch_size=4),
    dict(replay__replay_ratio=0.875, learner__batch_size=8),
    dict(replay__replay_ratio=0.1, learner__batch_size=30),  # 3.0000000000000004 in floating point
    dict(learner__clip_rho=None, learner__clip_c=None, learner__clip_pg_rho=None),
    dict(learner__clip_c=0.0),  # c-bar 0: one-step targets, as lambda 0
    dict(learner__grad_clip=0.0, learner__grad_clip_type="none"),
    dict(backend="inline", report_interval_s=0.0),  # inline: a record after every update
    dict(report_interval_s=0.1, levels__snapshot_interval_s=1.0, replay__snapshot_interval_s=1.0),
    dict(replay__min_size=5000),  # replay off: its buffer is never built
    dict(learner__device="cpu"),
])
def test_sound_configs_pass(paths):
    assert validate(cfg_with(**paths)) == []


@pytest.mark.parametrize("paths, match", [
    (dict(replay__replay_ratio=0.5, learner__batch_size=3),
     r"replay\.replay_ratio × learner\.batch_size = 0\.5 × 3 = 1\.5 .* 2 of 3, an effective ratio of 0\.667"),
    (dict(replay__replay_ratio=0.5, learner__batch_size=1), r"round\(0\.5\) = 0 of 1, .*never sampled"),
    (dict(replay__replay_ratio=0.75, learner__batch_size=2), r"2 of 2, leaving no fresh unroll"),
    (dict(replay__replay_ratio=0.5, replay__min_size=100, replay__capacity=50),
     r"replay\.min_size = 100 is above replay\.capacity = 50"),
    (dict(learner__device="cuda0"), r"learner\.device: expected auto, cpu, cuda or cuda:N, got 'cuda0'"),
    (dict(learner__device="cuda:2", address="auto"), r"learner\.device = 'cuda:2' with backend ray"),
    (dict(learner__clip_rho=0.0), r"learner\.clip_rho must be > 0 or none"),
    (dict(learner__clip_pg_rho=-1.0), r"learner\.clip_pg_rho must be > 0 or none"),
    (dict(learner__clip_c=-0.1), r"learner\.clip_c must be >= 0 or none"),
    (dict(learner__grad_clip=0.0, learner__grad_clip_type="value"),
     r"learner\.grad_clip = 0 with learner\.grad_clip_type value"),
    (dict(report_interval_s=0.0), r"report_interval_s = 0 is below 0\.1 s"),
    (dict(levels__snapshot_interval_s=0.0), r"levels\.snapshot_interval_s = 0 is below 1 s"),
    (dict(replay__snapshot_interval_s=0.9), r"replay\.snapshot_interval_s = 0\.9 is below 1 s"),
    # a config built in Python never went through the CLI's per-field checks: they run here again
    (dict(learner__batch_size=0), r"learner\.batch_size: must be >= 1"),
    (dict(learner__queue_size=0), r"learner\.queue_size: must be >= 1"),
    (dict(learner__precision="fp16"), r"learner\.precision: expected one of auto, fp32, bf16"),
    (dict(replay__replay_ratio=1.0), r"replay\.replay_ratio: must be <= 0\.95"),
    (dict(learner__optimizer="sgd"), r"learner\.optimizer: expected one of adam, rmsprop"),
    (dict(levels__replay_prob=1.5), r"levels\.replay_prob: must be <= 1"),
    (dict(levels__replay_prob=-0.1), r"levels\.replay_prob: must be >= 0"),
    (dict(env__num_levels=0, levels__buffer_size=0),
     r"levels\.buffer_size = 0 with levels\.strategy value_l1 on an unbounded level space \(env\.num_levels = 0\)"),
    (dict(levels__robust=True, levels__strategy="random"),
     r"levels\.robust trains only on replayed levels, but levels\.strategy random never replays one"),
    (dict(levels__robust=True, model_loss__loss="muzero"),
     r"levels\.robust with model_loss\.loss muzero is not supported"),
])
def test_each_problem_is_refused_with_its_dotted_names(paths, match):
    with pytest.raises(ConfigError, match=match):
        validate(cfg_with(**paths))


def test_python_built_values_are_normalised_as_the_cli_would():
    cfg = cfg_with(learner__learning_rate="0.001", learner__batch_size=4.0)
    validate(cfg)
    assert cfg.learner.learning_rate == 0.001 and isinstance(cfg.learner.learning_rate, float)
    assert cfg.learner.batch_size == 4 and isinstance(cfg.learner.batch_size, int)


def test_the_replay_rule_is_exactly_when_the_mixer_trains_the_ratio_asked_for():
    """Accepted iff `ReplayFeed` replays ratio × batch unrolls and keeps a fresh one."""
    for step in range(0, 20):
        ratio = step * 0.05  # 0, 0.05, ... 0.95 as a user types them
        ratio = float(f"{ratio:.2f}")
        for batch in range(1, 33):
            mixer = ReplayFeed(ReplayConfig(replay_ratio=ratio), batch, None) if round(ratio * batch) < batch \
                else None
            try:
                validate(cfg_with(replay__replay_ratio=ratio, learner__batch_size=batch))
            except ConfigError:
                assert mixer is None or mixer.num_replayed != pytest.approx(ratio * batch), (ratio, batch)
            else:
                assert mixer is not None and mixer.num_replayed == pytest.approx(ratio * batch), (ratio, batch)
                assert mixer.num_fresh >= 1


def test_device_checks_follow_where_the_learner_runs(monkeypatch):
    """MOCKED GPUs: torch's CUDA probe is replaced; nothing here touches a real device."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"learner\.device = 'cuda', but this machine has no CUDA GPU"):
        validate(cfg_with(backend="inline", learner__device="cuda"))
    with pytest.raises(ConfigError, match="where the embedded Ray runs the learner"):
        validate(cfg_with(learner__device="cuda"))
    assert validate(cfg_with(learner__device="cuda", address="auto")) == []  # a cluster's GPUs: RayJob.start
    assert validate(cfg_with(learner__device="auto")) == []

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    for backend, device in (("inline", "cuda"), ("inline", "cuda:1"), ("ray", "cuda"), ("ray", "cuda:0")):
        assert validate(cfg_with(backend=backend, learner__device=device)) == []
    with pytest.raises(ConfigError, match=r"'cuda:2', but this machine has 2 CUDA device\(s\), cuda:0 to cuda:1"):
        validate(cfg_with(backend="inline", learner__device="cuda:2"))
    with pytest.raises(ConfigError, match="sees it as cuda:0"):
        validate(cfg_with(learner__device="cuda:1"))


def test_joining_a_cluster_without_a_gpu_is_refused_once_connected(monkeypatch):
    """MOCKED cluster: Ray's resource view is replaced, and no Ray is started or joined."""
    import ray

    from levelray.deploy.training import ray_backend

    monkeypatch.setattr(ray_backend, "init_ray", lambda *a, **k: False)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 8.0})
    monkeypatch.setattr(ray_backend.RayJob, "__init__", lambda *a, **k: pytest.fail("the job must not start"))
    cfg = cfg_with(learner__device="cuda", address="10.0.0.1:6379")
    with pytest.raises(ConfigError, match=r"learner\.device = 'cuda', but the Ray cluster at 10\.0\.0\.1:6379 has no"):
        ray_backend.RayJob.start(cfg, None)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 8.0, "GPU": 1.0})
    ray_backend.check_cluster_device(cfg)
    ray_backend.check_cluster_device(cfg_with(learner__device="cpu"))


def test_fixed_fields_are_returned_not_raised():
    cfg = cfg_with(replay__replay_ratio=0.5, learner__batch_size=3)
    kept = validate(cfg, fixed={"replay.replay_ratio", "learner.batch_size"})
    assert [p.paths for p in kept] == [("replay.replay_ratio", "learner.batch_size")]
    cfg = cfg_with(cfg, learner__device="gpu")  # learner.device may change on resume: still refused
    with pytest.raises(ConfigError, match=r"learner\.device"):
        validate(cfg, fixed={"replay.replay_ratio", "learner.batch_size"})


def test_python_api_refuses_before_writing_anything(tmp_path):
    import levelray

    cfg = cfg_with(backend="inline", learner__clip_rho=-1.0)
    cfg = cfg_with(cfg, env__id="CartPole-v1", run_dir=str(tmp_path / "run"))
    with pytest.raises(levelray.ConfigError, match=r"learner\.clip_rho"):
        levelray.train(cfg)
    assert not (tmp_path / "run").exists()


@pytest.mark.timeout(180)
def test_a_saved_config_the_checks_refuse_is_resumed_with_a_warning(tmp_path, capsys):
    """A run directory whose saved config holds a value the checks refuse (replay 0.5 of a batch of 3, written
    into config.yaml here) keeps what its checkpoint was trained with: resuming it warns instead of refusing,
    since --resume may not change those values."""
    run = tmp_path / "run"
    tiny = ["--backend", "inline", "--env", "CartPole-v1", "--num-levels", "0", "--num-actors", "1",
            "--envs-per-actor", "2", "--unroll-length", "8", "--metrics-port", "0", "--quiet"]
    assert main(["train", *tiny, "--batch-size", "2", "--replay-ratio", "0.5", "--replay-min-size", "2",
                 "--total-steps", "64", "--run-dir", str(run)]) == 0
    saved = yaml.safe_load((run / "config.yaml").read_text())
    saved["learner"]["batch_size"] = 3  # a value `validate` refuses for a new run
    (run / "config.yaml").write_text(yaml.safe_dump(saved))
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--total-steps", "160", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "levelray: warning: replay.replay_ratio × learner.batch_size = 0.5 × 3" in err
    assert "kept: the run being resumed was trained with it" in err


def test_the_model_loss_needs_discrete_actions():
    """One rule for the driver (which knows the env id) and the learner (which holds only the spec)."""
    from levelray.contracts.config import ModelLossConfig
    from levelray.contracts.spec import EnvSpec
    from levelray.contracts.validate import check_model_loss_actions

    box = EnvSpec(obs_shape=(3,), obs_dtype="float32", discrete=False, action_dim=1, action_low=(-2.0,),
                  action_high=(2.0,))
    choice = EnvSpec(obs_shape=(4,), obs_dtype="float32", discrete=True, num_actions=2)
    muzero = ModelLossConfig(loss="muzero")
    check_model_loss_actions(muzero, choice, "CartPole-v1")
    check_model_loss_actions(ModelLossConfig(loss="none"), box, "Pendulum-v1")
    with pytest.raises(ConfigError, match=r"model_loss\.loss = 'muzero' needs discrete actions .* but env\.id "
                                          r"'Pendulum-v1' has continuous ones; use --model-loss none"):
        check_model_loss_actions(muzero, box, "Pendulum-v1")
    with pytest.raises(ValueError, match=r"model_loss\.loss = 'muzero' needs discrete actions .* but the env "
                                         r"\(env\.id\) has continuous ones"):
        check_model_loss_actions(muzero, box)

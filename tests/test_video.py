"""Episode videos (`levelray evaluate --video`, `levelray train --video-interval`) and `level_frame`, on real
envs, real checkpoints of tiny inline runs and real H.264 files read back with imageio.

A video of an episode of L steps has exactly L frames (the frame each action was chosen on,
`deploy.evaluation.video`)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import gymnasium as gym
import imageio.v3 as iio
import numpy as np
import pytest

from levelray.actors.envs import level_frame
from levelray.contracts.config import EnvConfig, replace_paths
from levelray.deploy.cli import main
from levelray.deploy.evaluation.level_sets import level_set_seeds
from levelray.deploy.evaluation.video import watchable
from levelray.deploy.rundir import checkpoint_weights, resolve_checkpoint
from levelray.deploy.training.periodic_eval import PeriodicEvaluator
from tests.support import TINY_INLINE_RUN as TINY
from tests.support import json_output

NO_RENDER_ID = "levelray-test/NoRender-v0"


class NoRenderEnv(gym.Env):
    """A real gymnasium env that has no render mode at all: five steps of a constant observation."""

    metadata = {"render_modes": []}
    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(4, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(4, np.float32), 1.0, self.t >= 5, False, {}


def _train(run: Path, env: str, *extra: str) -> Path:
    assert main(["train", *TINY, "--env", env, "--total-steps", "64", "--run-dir", str(run), *extra]) == 0
    return run


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory, one_thread):
    return _train(tmp_path_factory.mktemp("video") / "cartpole", "CartPole-v1", "--num-levels", "20",
                  "--start-level", "100")


def _read(path: Path) -> tuple[tuple[int, ...], np.ndarray]:
    """`(frames, H, W, 3)` of an MP4 and its first frame, decoding every frame (one at a time: a long 512x512
    episode would not fit in memory at once)."""
    count, first = 0, None
    for frame in iio.imiter(path, plugin="pyav"):
        assert frame.dtype == np.uint8 and (first is None or frame.shape == first.shape)
        count, first = count + 1, frame if first is None else first
    return (count, *first.shape), first


def _shape(path: Path) -> tuple[int, ...]:
    return _read(path)[0]


def _exit_code(argv: list[str]) -> int:
    """`levelray ARGV`'s exit code (a refused command exits through argparse: SystemExit)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


def _evaluate_json(capsys, run: Path, *args: str) -> dict:
    capsys.readouterr()
    assert main(["evaluate", str(run), "--json", *args]) == 0
    return json_output(capsys.readouterr().out)


@pytest.mark.timeout(120)
def test_cartpole_videos_play_the_evaluated_episodes(cartpole_run, tmp_path, capsys):
    out_dir = tmp_path / "videos"
    out = _evaluate_json(capsys, cartpole_run, "--levels", "train,test", "--episodes", "2", "--greedy",
                         "--video", str(out_dir), "--video-episodes", "2")
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(Path(v["path"]).name for v in out["videos"])
    assert [v["level_set"] for v in out["videos"]] == ["train", "train", "test", "test"]
    env = resolve_checkpoint(cartpole_run)["cfg"].env
    for which in ("train", "test"):
        videos = [v for v in out["videos"] if v["level_set"] == which]
        # greedy CartPole is deterministic: video i is the statistics' episode i (same level, same return)
        assert [v["seed"] for v in videos] == out["results"][which]["seeds"]
        assert [v["return"] for v in videos] == out["results"][which]["returns"]
        for v in videos:
            path = Path(v["path"])
            assert path.parent == out_dir
            assert path.name == f"{which}-seed{v['seed']}-return{v['return']:.2f}.mp4"
            assert iio.immeta(path, plugin="pyav")["codec"] == "h264"
            shape, shown = _read(path)
            # 400x600 rendering, padded to 400x608; one frame per step (CartPole: return = steps)
            assert shape == (v["length"], 400, 608, 3) == (int(v["return"]), 400, 608, 3)
            assert v["frames"] == v["length"]
            first = watchable(level_frame(env, v["seed"])).astype(np.int16)
            assert np.abs(shown.astype(np.int16) - first).mean() < 4  # the level's start, up to H.264's loss


@pytest.mark.timeout(120)
def test_minigrid_videos_show_the_whole_grid(tmp_path_factory, one_thread, tmp_path, capsys):
    run = _train(tmp_path_factory.mktemp("video") / "minigrid", "minigrid:DoorKey-5x5", "--max-episode-steps", "12")
    out = _evaluate_json(capsys, run, "--levels", "test,7-8", "--episodes", "2", "--video", str(tmp_path / "v"))
    assert [v["level_set"] for v in out["videos"]] == ["test", "7-8"]  # one per level set by default
    assert out["videos"][1]["seed"] == 7
    for v in out["videos"]:
        # the 5x5 grid at 32 pixels a cell (160x160), enlarged twice: not the agent's 7x7 view
        assert _shape(Path(v["path"])) == (v["length"], 320, 320, 3)
        assert 1 <= v["length"] <= 12


@pytest.mark.timeout(180)
def test_procgen_video_is_the_512_pixel_rendering(tmp_path_factory, one_thread, tmp_path, capsys):
    run = _train(tmp_path_factory.mktemp("video") / "procgen", "procgen:leaper", "--num-levels", "50")
    out = _evaluate_json(capsys, run, "--levels", "test", "--episodes", "1", "--video", str(tmp_path / "v"))
    (v,) = out["videos"]
    assert _shape(Path(v["path"])) == (v["length"], 512, 512, 3)
    assert v["seed"] == out["results"]["test"]["seeds"][0] and v["seed"] >= 50  # a held-out level


@pytest.mark.timeout(120)
def test_an_env_that_cannot_render_is_refused_before_anything_is_written(tmp_path, one_thread, capsys):
    gym.register(NO_RENDER_ID, entry_point=NoRenderEnv)
    try:
        run = _train(tmp_path / "run", NO_RENDER_ID, "--num-levels", "10")
        capsys.readouterr()
        assert _exit_code(["evaluate", str(run), "--video", str(tmp_path / "v")]) == 2
        err = capsys.readouterr().err
        train_run = tmp_path / "train-run"
        assert _exit_code(["train", *TINY, "--env", NO_RENDER_ID, "--num-levels", "10", "--eval-interval", "2",
                           "--video-interval", "1", "--run-dir", str(train_run)]) == 2
        train_err = capsys.readouterr().err
    finally:
        gym.registry.pop(NO_RENDER_ID)
    assert f"--video: cannot record a video: {NO_RENDER_ID} cannot render RGB frames" in err, err
    assert "without rgb_array" in err
    assert not (tmp_path / "v").exists()
    assert f"--video-interval: cannot record a video: {NO_RENDER_ID} cannot render RGB frames" in train_err, train_err
    assert not train_run.exists()


def test_video_flags_are_checked(cartpole_run, tmp_path, capsys):
    capsys.readouterr()
    assert _exit_code(["evaluate", str(cartpole_run), "--video", str(tmp_path), "--video-episodes", "0"]) == 2
    assert "--video-episodes: must be >= 1" in capsys.readouterr().err
    assert _exit_code(["evaluate", str(cartpole_run), "--video-episodes", "2"]) == 2
    assert "--video-episodes: needs --video DIR" in capsys.readouterr().err
    run = tmp_path / "run"
    assert _exit_code(["train", *TINY, "--env", "CartPole-v1", "--video-interval", "2", "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err
    assert "eval.video_interval" in err and "eval.interval_updates" in err and "--eval-interval" in err, err
    assert not run.exists()


def _video_records(run: Path) -> list[dict]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in records if "test_video" in r or "test_video_error" in r]


@pytest.mark.timeout(120)
def test_train_records_every_nth_evaluation_into_the_run_dir(tmp_path, one_thread):
    run = _train(tmp_path / "run", "CartPole-v1", "--num-levels", "20", "--eval-interval", "1",
                 "--eval-episodes", "2", "--eval-envs", "2", "--video-interval", "2")
    cfg = resolve_checkpoint(run)["cfg"]
    seed = int(level_set_seeds(cfg, "test", 2, cfg.seed)[0])  # the first held-out seed, every time
    records = _video_records(run)
    assert [r["test_version"] for r in records] == [2, 4]  # 4 updates, an evaluation after each
    names = sorted(p.name for p in (run / "videos").iterdir())
    assert names == sorted(Path(r["test_video"]).name for r in records)
    for r in records:
        assert r["test_video"].startswith("videos/v0000000") and f"-test-seed{seed}-return" in r["test_video"]
        episode_return = float(r["test_video"].rsplit("-return", 1)[1][:-len(".mp4")])
        assert _shape(run / r["test_video"]) == (int(episode_return), 400, 608, 3)


@pytest.mark.timeout(180)
def test_on_ray_the_task_records_and_the_driver_writes(cartpole_run, tmp_path, ray_session):
    ckpt = resolve_checkpoint(cartpole_run)
    cfg = replace_paths(ckpt["cfg"], {"eval.interval_updates": 1, "eval.video_interval": 1, "eval.episodes": 2,
                                      "eval.num_envs": 2, "run_dir": str(tmp_path)})
    ev = PeriodicEvaluator(cfg, use_ray=True)
    ev.maybe_start(3, ray_session.put(checkpoint_weights(ckpt)), env_steps=48)
    deadline = time.time() + 120
    while (result := ev.poll()) is None:
        assert time.time() < deadline, "no evaluation result"
        time.sleep(0.1)
    assert result["test_version"] == 3 and "test_return_mean" in result
    path = tmp_path / result["test_video"]
    assert path.parent == tmp_path / "videos" and path.name.startswith("v00000003-test-seed")
    assert _shape(path)[1:] == (400, 608, 3)


@pytest.mark.parametrize("env_id", ["procgen:maze", "minigrid:DoorKey-6x6"])
def test_level_frame_is_the_level(env_id):
    cfg = EnvConfig(id=env_id)
    a, again, other = level_frame(cfg, 11), level_frame(cfg, 11), level_frame(cfg, 12)
    assert a.dtype == np.uint8 and a.ndim == 3 and a.shape[2] == 3
    assert a.shape == ((512, 512, 3) if env_id.startswith("procgen") else (6 * 32, 6 * 32, 3))
    assert np.array_equal(a, again)
    assert not np.array_equal(a, other)


def test_small_frames_are_enlarged_and_padded_to_macroblocks():
    atari = np.arange(210 * 160 * 3, dtype=np.uint32).astype(np.uint8).reshape(210, 160, 3)
    out = watchable(atari)
    assert out.shape == (432, 320, 3)  # x2 to 420x320, then padded to multiples of 16
    assert np.array_equal(out[:420:2, ::2], atari) and not out[420:].any()
    assert watchable(np.zeros((512, 512, 3), np.uint8)).shape == (512, 512, 3)

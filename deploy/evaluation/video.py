"""Episode videos: one episode played as an evaluation plays it, on one env built to render, saved as H.264 MP4.

`levelray evaluate --video DIR` records `--video-episodes` episodes of each level set (`write_level_set_videos`);
`levelray train --video-interval N` one held-out episode with every Nth periodic evaluation, into
`RUN_DIR/videos/` (`deploy.training.periodic_eval`; on Ray a task plays and encodes it and returns the MP4's bytes,
which the driver writes, since the run directory is on the driver's machine).

An episode is played by the evaluation's own policy code (`actors.rollout.RolloutWorker`, greedy or sampled as
asked) on a vector of one env built with `render=True` (`actors.envs.make_env_vector`), apart from the episodes
an evaluation's statistics come from, so those are the same with or without videos.

Frames: one per agent step, the frame the action was chosen on, so an episode of L steps is exactly L frames
(the frame after the last step is not shown: procgen starts the next level within that step, and every family
is recorded alike). Each frame is made watchable (`watchable`): enlarged by a whole factor, nearest neighbour,
until its shorter side is at least `MIN_SIDE` pixels (small MiniGrid grids, Atari's 210x160 screen), then padded
with black at the right and bottom to multiples of `BLOCK` (H.264's 16-pixel macroblocks; padding rather than
imageio-ffmpeg's `macro_block_size` resize, so no pixel is interpolated). procgen's 512x512 rendering and
MiniGrid's 32-pixel cells need neither. The frame rate is the game's pace (`EnvVector.render_fps`).

Encoding: imageio's PyAV plugin with libx264 and yuv420p (what browsers play), streamed frame by frame. The
`av` wheel ships FFmpeg with libx264. imageio-ffmpeg (whose wheel ships an ffmpeg binary too) is not used: gym3,
which procgen needs, holds it below 0.4, and 0.3 imports setuptools' `pkg_resources`, which setuptools 81
removed, and lacks the `audio_path` argument imageio 2.38's ffmpeg plugin passes.

Names: `{level set}-seed{seed}-return{return:.2f}.mp4` (e.g. `test-seed1234567-return8.50.mp4`), and for the
periodic evaluation `v{learner version:08d}-test-seed{seed}-return{return:.2f}.mp4`; a name already taken gets
`-2`, `-3`, ... before `.mp4`. A file appears under its name only once it is complete (written beside it, then
renamed).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from levelray.contracts.config import ConfigError, EnvConfig, RunConfig

MIN_SIDE = 256  # pixels: a frame's shorter side is enlarged to at least this
BLOCK = 16  # H.264 macroblock: frame sides are padded to multiples of it
VIDEOS_DIR = "videos"  # RUN_DIR/videos/: the periodic evaluation's videos


def check_renders(cfg: EnvConfig, flag: str) -> None:
    """ConfigError naming the env and `flag` where `cfg.id` cannot draw frames (before anything is written)."""
    from levelray.actors.env_vector import CannotRender
    from levelray.actors.envs import level_frame

    try:
        level_frame(cfg, 0)
    except CannotRender as exc:
        raise ConfigError(f"{flag}: cannot record a video: {exc}") from None


def watchable(frame: np.ndarray) -> np.ndarray:
    """`frame [H, W, 3]` enlarged by a whole factor to a shorter side >= MIN_SIDE and padded with black to
    multiples of BLOCK: `[H', W', 3]` uint8 (see the module doc)."""
    h, w = frame.shape[:2]
    factor = max(1, -(-MIN_SIDE // min(h, w)))
    if factor > 1:
        frame = frame.repeat(factor, axis=0).repeat(factor, axis=1)
    h, w = frame.shape[:2]
    pad_h, pad_w = -h % BLOCK, -w % BLOCK
    if pad_h or pad_w:
        frame = np.pad(frame, ((0, pad_h), (0, pad_w), (0, 0)))
    return np.ascontiguousarray(frame, dtype=np.uint8)


def video_name(level_set: str, seed: int, episode_return: float, version: int | None = None) -> str:
    """`test-seed1234567-return8.50.mp4`; with `version`, `v00000120-test-seed...` (see the module doc)."""
    prefix = f"v{int(version):08d}-" if version is not None else ""
    return f"{prefix}{level_set}-seed{int(seed)}-return{float(episode_return):.2f}.mp4"


class Mp4Writer:
    """H.264 MP4 at `path`, one frame at a time (`write(frame [H, W, 3] uint8)`, made `watchable`)."""

    def __init__(self, path: str | os.PathLike, fps: float):
        import imageio.v3 as iio

        self._file = iio.imopen(Path(path), "w", plugin="pyav")
        self._fps = fps
        self.frames = 0
        self.size: tuple[int, int] | None = None  # (height, width) of the encoded frames

    def write(self, frame: np.ndarray) -> None:
        frame = watchable(frame)
        if self.size is None:
            self.size = (frame.shape[0], frame.shape[1])
            self._file.init_video_stream("libx264", fps=self._fps, pixel_format="yuv420p")
        self._file.write_frame(frame)
        self.frames += 1

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> Mp4Writer:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self.close()
        except Exception:
            if exc_type is None:  # else the error that stopped the episode is the one to see
                raise


def record_episode(cfg: RunConfig, weights: dict[str, np.ndarray], level_seed: int, path: str | os.PathLike, *,
                   greedy: bool, seed: int, encodings: dict[int, bytes] | None = None) -> dict[str, Any]:
    """Play one episode of level `level_seed` and encode it into the MP4 `path`; returns `{seed (played),
    return, length, success (None where the env does not say), frames (= length), height, width}`.
    `encodings`: `{id: bytes}` of levels that exist only as data (mazes read from files)."""
    from levelray.actors.env_vector import WithEncodings
    from levelray.actors.envs import make_env_vector
    from levelray.actors.rollout import RolloutWorker

    source = lambda _k: int(level_seed)  # noqa: E731
    vec = make_env_vector(cfg.env, 1, WithEncodings(source, encodings) if encodings else source, seed=int(seed),
                          render=True)
    try:
        worker = RolloutWorker(vec, 1, learner=cfg.learner, seed=int(seed))
        worker.set_weights(0, weights)
        obs, total, length = worker.observation, 0.0, 0
        with Mp4Writer(path, vec.render_fps) as out:
            while True:
                out.write(vec.render(0))
                actions = worker.act(obs, greedy=greedy)[0]
                step = vec.step(actions)
                worker.observe(actions, step)
                total += float(step.episode_rewards[0])  # the game's score (Atari: unclipped)
                length += 1
                if step.terminated[0] or step.truncated[0]:
                    break
                obs = step.obs
    finally:
        vec.close()
    height, width = out.size
    return {"seed": int(step.level_seeds[0]), "return": total, "length": length, "success": step.success.get(0),
            "frames": out.frames, "height": height, "width": width}


def record_to_bytes(cfg: RunConfig, weights: dict[str, np.ndarray], level_seed: int, *, greedy: bool,
                    seed: int) -> tuple[dict[str, Any], bytes]:
    """`record_episode` into a temporary file; returns its result and the MP4's bytes (a Ray task's answer:
    the run directory is on the driver's machine)."""
    with tempfile.TemporaryDirectory(prefix="levelray-video-") as tmp:
        path = Path(tmp) / "episode.mp4"
        info = record_episode(cfg, weights, level_seed, path, greedy=greedy, seed=seed)
        return info, path.read_bytes()


def _free_name(directory: Path, name: str) -> Path:
    """`directory/name`, or with `-2`, `-3`, ... before `.mp4` where that is taken."""
    path, n = directory / name, 1
    while path.exists():
        n += 1
        path = directory / f"{name[:-len('.mp4')]}-{n}.mp4"
    return path


def save_video(directory: str | os.PathLike, name: str, data: bytes) -> Path:
    """Write the MP4 `data` as `directory/name` (created; a free name, see `_free_name`); returns the path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{name}.partial"
    tmp.write_bytes(data)
    path = _free_name(directory, name)
    os.replace(tmp, path)
    return path


def write_level_set_videos(cfg: RunConfig, weights: dict[str, np.ndarray], seeds_by_set: dict[str, np.ndarray],
                           directory: str | os.PathLike, episodes: int, *, greedy: bool, seed: int,
                           encodings: dict[int, bytes] | None = None) -> list[dict[str, Any]]:
    """`episodes` videos per level set in `directory` (created), episode i on the set's seed i (cycled): the
    level the evaluation's episode i starts on (`encodings` as `record_episode` takes them). Returns each
    video's `record_episode` result with `level_set` and `path`."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    videos = []
    for which, seeds in seeds_by_set.items():
        seeds = np.asarray(seeds, dtype=np.int64).reshape(-1)
        for i in range(episodes):
            tmp = directory / f".recording-{os.getpid()}.mp4"
            try:
                info = record_episode(cfg, weights, int(seeds[i % seeds.size]), tmp, greedy=greedy, seed=seed + i,
                                      encodings=encodings)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            path = _free_name(directory, video_name(which, info["seed"], info["return"]))
            os.replace(tmp, path)
            videos.append({"level_set": which, "path": str(path), **info})
    return videos

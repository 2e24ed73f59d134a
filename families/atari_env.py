"""Atari 2600 through ale-py: `--env atari:<game>` (e.g. `atari:breakout`) or `--env ALE/<Game>-v5`.

Both name the same env: `atari:breakout` is `ALE/Breakout-v5`, the game as ALE v5 defines it (sticky
actions with `repeat_action_probability` 0.25, the minimal action set, episodes cut at 108,000 emulator
frames = 30 minutes). `<Game>NoFrameskip-v4` ids are taken too: the same game without sticky actions (the
protocol of the DQN and IMPALA papers). Other ALE ids (v0, and v4 with ALE's own frame skipping) are
refused: their frame skipping would stack on the preprocessing's.

The preprocessing is the standard one of the IMPALA and Muesli papers, made of gymnasium's own wrappers:

- `gymnasium.wrappers.AtariPreprocessing` on an ALE env built with `frameskip=1` (the wrapper skips frames
  itself and refuses a base env that skips too): up to 30 no-op actions at reset (a uniform draw from
  1..30), each action repeated for 4 emulator frames with the max of the last two frames as the
  observation, 84×84 grayscale (`cv2.INTER_AREA`). Sticky actions are ALE's own, per emulator frame, so
  four frames at `repeat_action_probability` 0.25 are exactly what `ALE/<Game>-v5`'s `frameskip=4` plays.
  `terminal_on_life_loss=False`: an episode is the whole game, all lives (Machado et al. 2018's
  recommendation and the "full episode" protocol the reported scores use); a lost life is no episode end.
- `gymnasium.wrappers.FrameStackObservation` of the last 4 frames (the first frame repeated at reset),
  turned from its `[4, 84, 84]` into uint8 `[84, 84, 4]` (`[H, W, C]`, the newest frame in channel 3), the
  image layout `policy.models.ImpalaCNN` reads, so the IMPALA CNN is what `--model auto` picks and
  actors ship one byte per pixel.
- Reward clipping for training: `AtariVector` gives the learner `sign(reward)` and
  keeps the game's own reward as `StepResult.raw_rewards`, which episode returns (`episode_return_mean`,
  `levelray evaluate`, `--stop-at-return`) are summed from: every reported return is the game's score.
- `--max-episode-steps N` cuts episodes at N agent steps (4N frames), on top of ALE's 108,000 frames.

The level is the `reset(seed=...)` seed as for any gymnasium env: it seeds ALE's random generator (sticky
actions) and the no-op count; it does not change the game itself.

ale_py is imported (and registers its ids with gymnasium) only when an Atari id is resolved or an env built,
cv2 only when the preprocessing is built: the dispatch in `actors.envs` loads this module for every env.
"""

from __future__ import annotations

import difflib
import functools
import re

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from levelray.actors.env_vector import LevelSource, StepResult, spec_of_one_env
from levelray.contracts.config import EnvConfig
from levelray.contracts.families import register_family
from levelray.contracts.spec import EnvSpec
from levelray.families.gymnasium_env import GymnasiumVector

PREFIX = "atari:"
FRAME_SKIP = 4
FRAME_STACK = 4
SCREEN_SIZE = 84
NOOP_MAX = 30
_V5 = re.compile(r"^ALE/([A-Za-z0-9]+)-v5$")
_NOFRAMESKIP = re.compile(r"^([A-Za-z0-9]+)NoFrameskip-v4$")


@functools.cache
def _register_ale() -> None:
    """Register the ALE ids with gymnasium (ale_py does so only once asked)."""
    import ale_py

    gym.register_envs(ale_py)


def _key(name: str) -> str:
    """`space_invaders`, `SpaceInvaders` and `space-invaders` all give `spaceinvaders`."""
    return re.sub(r"[_\-\s]", "", name).lower()


def _v5_ids() -> dict[str, str]:
    """{ALE's snake_case game name: `ALE/<Game>-v5`} of every game ale-py ships."""
    _register_ale()
    out = {}
    for env_id, registered in gym.envs.registry.items():
        if _V5.match(env_id) and "game" in registered.kwargs:
            out[registered.kwargs["game"]] = env_id
    return out


def games() -> list[str]:
    """Every `atari:<game>` name (ALE's snake_case game names), sorted."""
    return sorted(_v5_ids())


def is_ale_id(env_id: str) -> bool:
    """A gymnasium id that ale-py registers (any version)."""
    _register_ale()
    registered = gym.envs.registry.get(env_id)
    return registered is not None and "ale_py" in str(registered.entry_point)


def gymnasium_id(env_id: str) -> str:
    """`atari:breakout` (or `atari:Breakout`) -> `ALE/Breakout-v5`; an `ALE/<Game>-v5` or
    `<Game>NoFrameskip-v4` id is returned as it is. ValueError naming the accepted forms (and close
    matches) for anything else."""
    v5 = _v5_ids()
    if env_id.startswith(PREFIX):
        name = env_id[len(PREFIX):]
        by_key = {_key(g): i for g, i in v5.items()} | {_key(_V5.match(i).group(1)): i for i in v5.values()}
        if _key(name) in by_key:
            return by_key[_key(name)]
        close = difflib.get_close_matches(name.lower(), list(v5), n=3)
        hint = f" Did you mean {', '.join(PREFIX + c for c in close)}?" if close else ""
        raise ValueError(f"unknown Atari game {env_id!r}.{hint} Games (ALE's names): {', '.join(sorted(v5))}")
    if env_id in v5.values() or (_NOFRAMESKIP.match(env_id) and is_ale_id(env_id)):
        return env_id
    if is_ale_id(env_id):
        game = gym.envs.registry[env_id].kwargs.get("game", "")
        camel = _V5.match(v5[game]).group(1) if game in v5 else "<Game>"
        raise ValueError(f"{env_id!r}: levelray plays Atari with its own frame skipping (gymnasium's "
                         f"AtariPreprocessing), which this id's ALE frame skipping would multiply; use "
                         f"--env {PREFIX}{game} (= ALE/{camel}-v5, sticky actions) or {camel}NoFrameskip-v4 "
                         f"(no sticky actions)")
    ids = [PREFIX + g for g in v5] + list(v5.values())
    close = difflib.get_close_matches(env_id, ids, n=3)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise ValueError(f"unknown Atari env {env_id!r}.{hint} Give atari:<game> (e.g. atari:breakout), "
                     f"ALE/<Game>-v5 or <Game>NoFrameskip-v4")


def game_name(env_id: str) -> str:
    """ALE's snake_case name of the game an id plays (`ALE/SpaceInvaders-v5` -> `space_invaders`)."""
    return gym.envs.registry[gymnasium_id(env_id)].kwargs["game"]


class ChannelsLast(gym.ObservationWrapper):
    """`FrameStackObservation`'s `[stack, H, W]` as `[H, W, stack]` (oldest frame first, newest last)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        n, h, w = env.observation_space.shape
        self.observation_space = spaces.Box(0, 255, (h, w, n), np.uint8)

    def observation(self, obs):
        return np.ascontiguousarray(np.moveaxis(np.asarray(obs), 0, -1))


def make(env_id: str, max_episode_steps: int | None = None, render_mode: str | None = None) -> gym.Env:
    """One preprocessed Atari env (see the module doc) for an id `gymnasium_id` accepts; `render_mode="rgb_array"`:
    `render()` gives the emulator's colour screen `[210, 160, 3]` (the last of the skipped frames)."""
    gym_id = gymnasium_id(env_id)
    base = gym.make(gym_id, frameskip=1, disable_env_checker=True, render_mode=render_mode)
    env = gym.wrappers.AtariPreprocessing(
        base,
        noop_max=NOOP_MAX,
        frame_skip=FRAME_SKIP,
        screen_size=SCREEN_SIZE,
        terminal_on_life_loss=False,
        grayscale_obs=True,
        scale_obs=False,
    )
    env = ChannelsLast(gym.wrappers.FrameStackObservation(env, FRAME_STACK))
    if max_episode_steps is not None:
        env = gym.wrappers.TimeLimit(env, max_episode_steps)  # agent steps: outside the frame skipping
    return env


class AtariVector(GymnasiumVector):
    """K preprocessed Atari envs (see the module doc). The learner trains on `sign(reward)` (the IMPALA and
    DQN papers' reward clipping; Atari scores are integers, so this is also clipping to [-1, 1]);
    `raw_rewards` keeps the game's own, from which episode returns are summed."""

    def __init__(
        self, env_id: str, num_envs: int, cfg: EnvConfig, level_source: LevelSource | None = None, seed: int = 0,
        render: bool = False,
    ):
        self.gym_id = gymnasium_id(env_id)
        self.game = game_name(self.gym_id)
        mode = "rgb_array" if render else None
        super().__init__(self.gym_id, num_envs, cfg, level_source, seed,
                         make_env=lambda: make(self.gym_id, cfg.max_episode_steps, mode), render=render)
        self.render_fps = 60.0 / FRAME_SKIP  # real time: the 2600 draws 60 frames a second, an agent step is 4

    def step(self, actions: np.ndarray) -> StepResult:
        step = super().step(actions)
        step.raw_rewards = step.rewards
        step.rewards = np.sign(step.rewards).astype(np.float32)
        return step


def matches(env_id: str) -> bool:
    """`atari:<game>` and `ALE/...` by name; any other id only where ale-py registers it (a registered id of
    another library is answered without loading ale_py). A bare ALE id other than the two this module plays is
    matched so that `make_vector` refuses it: raw frames, with ALE's own frame skipping."""
    if env_id.startswith((PREFIX, "ALE/")):
        return True
    registered = gym.envs.registry.get(env_id)
    return (registered is None or "ale_py" in str(registered.entry_point)) and is_ale_id(env_id)


def make_vector(cfg: EnvConfig, num_envs: int, level_source: LevelSource | None = None, seed: int = 0, *,
                render: bool = False) -> AtariVector:
    return AtariVector(cfg.id, num_envs, cfg, level_source, seed, render)


def spec(cfg: EnvConfig) -> EnvSpec:
    return spec_of_one_env(make_vector, cfg)


def ids() -> list[str]:
    return [PREFIX + "<game>"]


DISPATCH_RANK = 40  # where `env.family auto` tries it (contracts.families)
register_family("atari", __name__)  # at the end: the family is this module's functions above

"""levelray's maze env beside JaxUED's, env steps/s on one core at the same batch, in interleaved rounds.

    taskset -c 1 python -m benchmarks.bench_maze_jaxued --jax-python /work/scratch-jax/bin/python \
        [--envs 16 64 256] [--rounds 3] [--seconds 2] [--minigrid] [--json PATH]

- levelray (`maze:13x13`): `MazeVector.step` called from Python once per step, as an actor calls it, with
  uniform random actions (drawn by NumPy 256 steps at a time, `ACTION_BLOCK`; `benchmarks.bench_env` draws them
  each step, which costs ~4 us a step more), episodes auto-reset onto levels drawn from 200 training levels of 25
  walls; the 7x7 view with MiniGrid's occlusion every step.
- JaxUED (`jaxued` 0.0.1 on jax, CPU), only with `--jax-python`: a Python of a scratch environment that has
  `jax`, `jaxued` and `six` (`python3 -m venv DIR && DIR/bin/pip install jax jaxued six`; never a levelray
  dependency), run as a subprocess that answers one measurement a line. Its `Maze` at 13x13 with its 5x5 view
  (which sees through walls), `AutoReplayWrapper` (the auto-reset of JaxUED's own training rollouts), 25-wall
  levels from `make_level_generator`, random actions, `jit` + `vmap`, in two ways:
  `scan`: 256-step rollouts in one jitted `lax.scan` keeping observations, rewards and dones (how JaxUED's
  training collects); `call`: one jitted step per Python call with NumPy actions in (drawn as levelray's) and
  arrays out (how a Python actor would call it).
- `--minigrid`: the MiniGrid-built env (`MiniGridObs` around `MazeGridEnv`, one env at a time: the reference the
  arrays are tested against), at the first `--envs` only (it is slow).

Every (implementation, K) is measured once a round, rounds interleaved, and the median of the rounds reported.
Run it pinned to one core (`taskset -c N`; the subprocess inherits the pin) with one XLA and BLAS thread: jax
is started with `--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time

import numpy as np

from benchmarks.common import print_table, write_json
from levelray.actors.envs import make_env_vector
from levelray.contracts.config import EnvConfig

ENV = EnvConfig(id="maze:13x13", num_levels=200, maze_blocks="25")
# Random actions are drawn this many steps at a time: one `Generator.integers` call costs ~4 us here, as much as
# 16 envs' step, and JaxUED's rollouts draw theirs inside the compiled loop.
ACTION_BLOCK = 256
JAX_FLAGS = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"

JAXUED_SCRIPT = r'''
import json, sys, time

import jax
jax.tree_map = jax.tree.map  # jaxued 0.0.1 predates jax's removal of jax.tree_map
import numpy as np
from jaxued.environments import Maze
from jaxued.environments.maze import make_level_generator
from jaxued.wrappers import AutoReplayWrapper

T = 256
env = AutoReplayWrapper(Maze(max_height=13, max_width=13, agent_view_size=5))
params = env.default_params
generate = make_level_generator(13, 13, 25)
step_v = jax.vmap(env.step, in_axes=(0, 0, 0, None))
compiled = {}


def start(K):
    rng = jax.random.PRNGKey(0)
    levels = jax.vmap(generate)(jax.random.split(rng, K))
    _, state = jax.vmap(env.reset_to_level, in_axes=(0, 0, None))(jax.random.split(rng, K), levels, params)
    return state


def make(K, mode):
    if mode == "scan":
        @jax.jit
        def rollout(rng, state):
            def one(carry, _):
                rng, state = carry
                rng, ra, rs = jax.random.split(rng, 3)
                actions = jax.random.randint(ra, (K,), 0, 7)
                obs, state, reward, done, _ = step_v(jax.random.split(rs, K), state, actions, params)
                return (rng, state), (obs.image, obs.agent_dir, reward, done)
            (rng, state), out = jax.lax.scan(one, (rng, state), None, length=T)
            return rng, state, out
        return rollout

    @jax.jit
    def one(rng, state, actions):
        rng, rs = jax.random.split(rng)
        obs, state, reward, done, _ = step_v(jax.random.split(rs, K), state, actions, params)
        return rng, state, (obs.image, obs.agent_dir, reward, done)
    return one


def measure(K, mode, seconds):
    fn = compiled.setdefault((K, mode), make(K, mode))
    state, rng, actions_rng = start(K), jax.random.PRNGKey(1), np.random.default_rng(0)

    def once():
        nonlocal rng, state
        if mode == "scan":
            rng, state, out = fn(rng, state)
            jax.block_until_ready(out)
            return T * K
        for actions in actions_rng.integers(0, 7, (T, K)):  # drawn T steps at a time, as levelray's
            rng, state, out = fn(rng, state, actions)
            for x in out:
                np.asarray(x)
        return T * K

    once()  # compiles on the first call of each (K, mode)
    n, start_time = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start_time) < seconds:
        n += once()
    return n / elapsed


print(json.dumps({"ready": True, "jax": jax.__version__}), flush=True)
for line in sys.stdin:
    K, mode, seconds = line.split()
    print(json.dumps({"steps_per_s": measure(int(K), mode, float(seconds))}), flush=True)
'''


class JaxUED:
    """The JaxUED subprocess (see the module doc): `rate(K, mode, seconds)` -> env steps/s."""

    def __init__(self, python: str):
        env = {**os.environ, "XLA_FLAGS": JAX_FLAGS, "JAX_PLATFORMS": "cpu", "OMP_NUM_THREADS": "1"}
        self.proc = subprocess.Popen([python, "-c", JAXUED_SCRIPT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env)
        self.version = json.loads(self.proc.stdout.readline())["jax"]

    def rate(self, K: int, mode: str, seconds: float) -> float:
        self.proc.stdin.write(f"{K} {mode} {seconds}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the JaxUED subprocess ended (exit code {self.proc.wait()})")
        return json.loads(line)["steps_per_s"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def minigrid_vector(K: int):
    """The MiniGrid-built maze family: K `MiniGridObs(MazeGridEnv)` stepped one at a time."""
    from levelray.families.gymnasium_env import GymnasiumVector
    from levelray.families.maze.env import default_max_steps
    from levelray.families.maze.grid import MazeGridEnv
    from levelray.families.maze.level import level_for_id, parse_blocks
    from levelray.families.minigrid.obs import MiniGridObs

    blocks = parse_blocks(ENV.maze_blocks)

    def make_env():
        return MiniGridObs(MazeGridEnv(13, 13, lambda i: level_for_id(i, 13, 13, blocks), default_max_steps(13, 13)))

    return GymnasiumVector(ENV.id, K, ENV, None, 0, make_env=make_env)


def levelray_rate(vec, seconds: float) -> float:
    """Env steps/s of `vec.step` with uniform random actions, drawn by NumPy `ACTION_BLOCK` steps at a time."""
    rng, K = np.random.default_rng(0), vec.num_envs
    vec.step(rng.integers(0, 7, K))  # warm-up (and numba's compile or cache load)
    n, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        for actions in rng.integers(0, 7, (ACTION_BLOCK, K)):
            vec.step(actions)
        n += ACTION_BLOCK * K
    return n / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jax-python", default=None, help="a Python with jax, jaxued and six (see the module doc)")
    parser.add_argument("--envs", type=int, nargs="+", default=[16, 64, 256], help="K: envs in the batch")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0, help="length of each measurement")
    parser.add_argument("--minigrid", action="store_true", help="also the MiniGrid-built env, at the first K")
    parser.add_argument("--json", default="benchmarks/out/bench_maze_jaxued.json")
    args = parser.parse_args()
    jaxued = JaxUED(args.jax_python) if args.jax_python else None
    vectors = {K: make_env_vector(ENV, K, None, seed=0) for K in args.envs}
    for vec in vectors.values():
        vec.reset()
    runs = [("levelray", K) for K in args.envs]
    if jaxued is not None:
        runs += [(f"jaxued {mode}", K) for K in args.envs for mode in ("scan", "call")]
    if args.minigrid:
        vectors["minigrid"] = minigrid_vector(args.envs[0])
        vectors["minigrid"].reset()
        runs.append(("minigrid", args.envs[0]))
    rates: dict[tuple[str, int], list[float]] = {run: [] for run in runs}
    try:
        for _ in range(args.rounds):
            for impl, K in runs:
                if impl.startswith("jaxued"):
                    rate = jaxued.rate(K, impl.split()[1], args.seconds)
                else:
                    rate = levelray_rate(vectors["minigrid" if impl == "minigrid" else K], args.seconds)
                rates[(impl, K)].append(rate)
    finally:
        if jaxued is not None:
            jaxued.close()
    results = [{"impl": impl, "K": K, "env_steps_per_s": statistics.median(r), "rounds": r}
               for (impl, K), r in rates.items()]
    by_k = {r["K"]: r["env_steps_per_s"] for r in results if r["impl"] == "levelray"}
    for r in results:
        r["levelray_over_this"] = by_k[r["K"]] / r["env_steps_per_s"]
    print_table(results, [("impl", "implementation"), ("K", "K"),
                          ("env_steps_per_s", "env steps/s", lambda x: f"{x:,.0f}"),
                          ("levelray_over_this", "levelray / this", lambda x: f"{x:.2f}")])
    write_json(args.json, {"results": results, "jax": jaxued.version if jaxued else None, "seconds": args.seconds,
                           "rounds": args.rounds}, benchmark="bench_maze_jaxued")


if __name__ == "__main__":
    main()

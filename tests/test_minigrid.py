"""MiniGrid (`--env minigrid:<name>`) on real minigrid envs: names, levels as reset seeds, the observation
encoding, success and truncation, the network, and training plus held-out evaluation through the CLI."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import torch

from levelray.actors.envs import env_spec, make_env_vector
from levelray.actors.rollout import RolloutWorker
from levelray.contracts.config import EnvConfig
from levelray.contracts.spec import MINIGRID_OBS, EnvSpec
from levelray.contracts.trajectory import validate_unroll
from levelray.deploy.cli import main
from levelray.learner.value_normalization import value_output_layer
from levelray.policy.models import MiniGridNet, build_model
from levelray.policy.numpy_policy import NumpyPolicy
from tests.support import json_output

NAMES = {
    "DoorKey-8x8": "MiniGrid-DoorKey-8x8-v0",
    "MultiRoom-N4-S5": "MiniGrid-MultiRoom-N4-S5-v0",
    "KeyCorridorS3R3": "MiniGrid-KeyCorridorS3R3-v0",
}
SPEC = EnvSpec((7, 7, 4), "uint8", True, num_actions=7, obs_encoding=MINIGRID_OBS)
LEFT, RIGHT, FORWARD = 0, 1, 2


def first_obs(name: str, seed: int) -> np.ndarray:
    vec = make_env_vector(EnvConfig(id=f"minigrid:{name}"), 1, lambda k: seed)
    try:
        return vec.reset()[0]
    finally:
        vec.close()


@pytest.mark.parametrize("name", NAMES)
def test_names_map_to_gymnasium_ids_and_the_spec_is_the_documented_encoding(name):
    vec = make_env_vector(EnvConfig(id=f"minigrid:{name}", num_levels=10), 3, lambda k: 5 + k)
    assert vec.gym_id == NAMES[name]
    assert vec.spec == SPEC and env_spec(EnvConfig(id=f"minigrid:{name}")) == SPEC
    assert not vec.spec.is_image and vec.spec.is_minigrid
    obs = vec.reset()
    assert obs.shape == (3, 7, 7, 4) and obs.dtype == np.uint8
    assert vec.current_levels().tolist() == [5, 6, 7]
    for k, env in enumerate(vec.envs):
        raw = env.unwrapped.gen_obs()  # MiniGrid's own dict observation of the same state
        np.testing.assert_array_equal(obs[k, ..., :3], raw["image"])
        assert (obs[k, ..., 3] == raw["direction"]).all() and 0 <= raw["direction"] <= 3
    step = vec.step(np.array([LEFT, RIGHT, FORWARD]))
    assert step.obs.shape == (3, 7, 7, 4) and step.obs.dtype == np.uint8
    assert step.level_seeds.tolist() == [5, 6, 7]
    vec.close()


@pytest.mark.parametrize("name", NAMES)
def test_the_level_is_the_reset_seed(name):
    np.testing.assert_array_equal(first_obs(name, 3), first_obs(name, 3))
    assert not np.array_equal(first_obs(name, 3), first_obs(name, 4))
    # the whole layout, not only the agent's view: same seed same grid, five seeds five grids
    grids = []
    for seed in (0, 1, 2, 3, 4, 0):
        vec = make_env_vector(EnvConfig(id=f"minigrid:{name}"), 1, lambda k, s=seed: s)
        vec.reset()
        env = vec.envs[0].unwrapped
        grids.append((env.grid.encode().tobytes(), tuple(env.agent_pos), env.agent_dir))
    assert grids[0] == grids[-1] and len(set(grids)) == 5


def test_unknown_names_say_how_names_are_formed():
    with pytest.raises(ValueError, match=r"Did you mean minigrid:DoorKey-8x8.*MiniGrid- prefix and -vN suffix"):
        make_env_vector(EnvConfig(id="minigrid:DoorKey8x8"), 1)
    with pytest.raises(ValueError, match="use --env minigrid:DoorKey-8x8 "):
        make_env_vector(EnvConfig(id="MiniGrid-DoorKey-8x8-v0"), 1)  # the gymnasium id has a dict observation
    with pytest.raises(ValueError, match="wheel lacks the pattern images"):
        make_env_vector(EnvConfig(id="minigrid:WFC-MazeSimple"), 1)
    # an explicit version picks that one; without it, the newest
    assert make_env_vector(EnvConfig(id="minigrid:ObstructedMaze-2Q-v0"), 1).gym_id == "MiniGrid-ObstructedMaze-2Q-v0"
    assert make_env_vector(EnvConfig(id="minigrid:ObstructedMaze-2Q"), 1).gym_id == "MiniGrid-ObstructedMaze-2Q-v1"


def test_reaching_the_goal_is_success():
    # Empty-5x5: the agent starts at (1, 1) facing right, the goal is at (3, 3)
    vec = make_env_vector(EnvConfig(id="minigrid:Empty-5x5"), 1, lambda k: 0)
    vec.reset()
    steps = [vec.step(np.array([a])) for a in (FORWARD, FORWARD, RIGHT, FORWARD, FORWARD)]
    assert not any(s.terminated[0] or s.truncated[0] or s.success for s in steps[:-1])
    last = steps[-1]
    assert last.terminated[0] and not last.truncated[0] and last.success == {0: True}
    assert last.rewards[0] == pytest.approx(1 - 0.9 * 5 / vec.envs[0].unwrapped.max_steps)


def test_success_is_terminated_with_reward_on_real_episodes():
    """LavaGap with random turns and steps: episodes end at the goal (success), in the lava (terminated, reward
    0: no success) and at MiniGrid's time limit (truncated: no success)."""
    vec = make_env_vector(EnvConfig(id="minigrid:LavaGapS5", num_levels=50), 4, None, seed=0)
    vec.reset()
    rng = np.random.default_rng(0)
    ends = Counter()
    for _ in range(300):
        step = vec.step(rng.integers(0, 3, size=4))
        for k in np.flatnonzero(step.terminated | step.truncated):
            assert step.success[k] == bool(step.terminated[k] and step.rewards[k] > 0)
            ends["goal" if step.success[k] else "lava" if step.terminated[k] else "time limit"] += 1
        assert set(step.success) == set(np.flatnonzero(step.terminated | step.truncated).tolist())
    assert set(ends) == {"goal", "lava", "time limit"}, ends


def test_minigrid_max_steps_is_truncation_and_max_episode_steps_replaces_it():
    vec = make_env_vector(EnvConfig(id="minigrid:Empty-5x5", max_episode_steps=3), 2, lambda k: 0)
    assert [env.unwrapped.max_steps for env in vec.envs] == [3, 3]  # MiniGrid's own limit, not a second one
    vec.reset()
    steps = [vec.step(np.array([LEFT, LEFT])) for _ in range(3)]  # turning in place never reaches the goal
    assert not any(s.truncated.any() or s.terminated.any() for s in steps[:2])
    last = steps[-1]
    assert last.truncated.all() and not last.terminated.any() and last.success == {0: False, 1: False}
    assert set(last.final_obs) == {0, 1}
    # three left turns from facing right (0) face down (1) in the final observation; the new episode's first
    # observation faces right again
    assert (last.final_obs[0][..., 3] == 1).all() and (last.obs[0][..., 3] == 0).all()
    default = make_env_vector(EnvConfig(id="minigrid:DoorKey-8x8"), 1)
    assert default.envs[0].unwrapped.max_steps == 10 * 8 * 8  # MiniGrid's default, reported as truncation


def test_network_shapes_popart_layer_and_the_torch_inference_path():
    torch.manual_seed(0)
    model = build_model(SPEC)
    assert isinstance(model, MiniGridNet)
    obs = torch.from_numpy(np.stack([first_obs("DoorKey-8x8", s) for s in range(5)]))
    params, value = model(obs)
    assert params.shape == (5, 7) and value.shape == (5,)
    torch.testing.assert_close(model.dist_params(obs), params)
    head = value_output_layer(model)
    assert head is model.value[-1] and head.out_features == 1
    # the symbolic indices, not their byte values, are what the network reads: an out-of-range index is clamped
    noisy = obs.clone()
    noisy[..., 0] = 255
    assert torch.isfinite(model(noisy)[0]).all()
    # gradients reach the embeddings and both heads
    loss = params.logsumexp(-1).sum() + value.square().sum()
    loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    # actors: no NumPy fast path (that is the MLP's); the torch model acts and produces valid unrolls
    assert not NumpyPolicy.supports(model)
    vec = make_env_vector(EnvConfig(id="minigrid:DoorKey-5x5", num_levels=10), 3, None, seed=0)
    worker = RolloutWorker(vec, 6, seed=0)
    assert isinstance(worker.model, MiniGridNet) and worker.policy.numpy_policy is None
    unroll = worker.unroll()
    validate_unroll(unroll, vec.spec, unroll_length=6, level_range=(0, 10))
    with torch.inference_mode():
        expected = worker.model.dist_params(torch.from_numpy(unroll["obs"][:1].reshape(-1, 7, 7, 4)))
    np.testing.assert_allclose(unroll["behaviour_params"][0], expected.numpy(), rtol=1e-6)


@pytest.mark.parametrize("view", [7, 5], ids=["minigrid-7x7", "dcd-5x5"])
def test_the_torso_and_its_gradients_match_a_float64_reference(view):
    """`_features` convolves the cells' one-hot rows with a kernel folded from the embedding where it is
    differentiated (no input gradient) and the looked-up embeddings elsewhere, and reads the direction with
    `index_select`: both forms' features and every parameter's gradient (tables, kernels, biases) equal an
    independent float64 computation of the documented layout, embedding then convolving."""
    torch.manual_seed(1)
    spec = EnvSpec((view, view, 4), "uint8", True, num_actions=7, obs_encoding=MINIGRID_OBS)
    model = build_model(spec).double()
    reference_model = build_model(spec).double()
    reference_model.load_state_dict(model.state_dict())
    obs = torch.from_numpy(np.random.default_rng(0).integers(0, 20, (6, view, view, 4), dtype=np.uint8))
    sizes = torch.tensor([16, 8, 4, 4])  # MINIGRID_TABLE_SIZES: object, colour, state, direction
    rows = torch.minimum(obs.long(), sizes - 1) + torch.cumsum(sizes, 0) - sizes
    onehot = torch.nn.functional.one_hot(rows, int(sizes.sum())).double()  # [N, V, V, 4, rows]
    table = reference_model.embed.weight
    cells = (onehot[..., :3, :] @ table).reshape(6, view, view, -1).permute(0, 3, 1, 2)
    expected = torch.cat([reference_model.conv(cells).flatten(1), onehot[:, 0, 0, 3] @ table], dim=1)

    with torch.no_grad():  # the embedding form: what actors run
        torch.testing.assert_close(model._features(obs), expected, rtol=1e-12, atol=1e-12)
    features = model._features(obs)  # the one-hot form: what a learner differentiates
    torch.testing.assert_close(features, expected, rtol=1e-12, atol=1e-12)
    upstream = torch.randn_like(features)
    (features * upstream).sum().backward()
    (expected * upstream).sum().backward()
    for (name, p), q in zip(model.named_parameters(), reference_model.parameters(), strict=True):
        if q.grad is None:  # the towers: not part of the torso
            assert p.grad is None, name
            continue
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-10, atol=1e-12, msg=name)


def test_other_models_and_specs():
    assert type(build_model(SPEC, "mlp")).__name__ == "MLP"  # flattens the indices: allowed, not the default
    with pytest.raises(ValueError, match="use minigrid_cnn"):
        build_model(SPEC, "impala_cnn")
    with pytest.raises(ValueError, match="minigrid:<name>"):
        build_model(EnvSpec((64, 64, 3), "uint8", True, num_actions=15), "minigrid_cnn")
    pixels = EnvSpec((64, 64, 3), "uint8", True, num_actions=15)
    assert pixels.is_image and not pixels.is_minigrid
    assert EnvSpec.from_dict(SPEC.to_dict()) == SPEC
    old = {k: v for k, v in pixels.to_dict().items() if k != "obs_encoding"}  # a spec saved before the field
    assert EnvSpec.from_dict(old) == pixels


TINY = ["--backend", "inline", "--num-actors", "1", "--envs-per-actor", "2", "--unroll-length", "8",
        "--batch-size", "1", "--metrics-port", "0", "--report-interval", "0", "--quiet", "--tensorboard", "false"]


def test_train_and_evaluate_through_the_cli(tmp_path, capsys):
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run = tmp_path / "doorkey"
        # a 20-step time limit keeps the evaluation's episodes short; PLR (the default strategy) on 50 levels
        assert main(["train", *TINY, "--env", "minigrid:DoorKey-5x5", "--num-levels", "50", "--start-level", "1000",
                     "--max-episode-steps", "20", "--total-steps", "160", "--run-dir", str(run)]) == 0
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert records[-1]["env_steps"] == 160 and records[-1]["learner_version"] == 10
        assert records[-1]["episodes"] >= 1  # two envs × 80 steps: the 20-step limit ended some episodes
        capsys.readouterr()
        assert main(["evaluate", str(run), "--levels", "train,test", "--episodes", "3", "--num-envs", "2",
                     "--json"]) == 0
    finally:
        torch.set_num_threads(before)
    out = json_output(capsys.readouterr().out)
    assert out["env"] == "minigrid:DoorKey-5x5" and out["training_levels"] == [1000, 1050] and out["held_out"]
    train, test = out["results"]["train"], out["results"]["test"]
    assert all(1000 <= s < 1050 for s in train["seeds"])
    assert len(set(test["seeds"])) == 3 and not any(1000 <= s < 1050 for s in test["seeds"])
    for r in (train, test):
        assert r["episodes"] == 3 and 0.0 <= r["success_rate"] <= 1.0  # MiniGrid defines success
        assert all(0.0 <= x < 1.0 for x in r["returns"])  # 1 - 0.9 * steps / max_steps at the goal, else 0

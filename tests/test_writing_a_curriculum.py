"""The curriculum interface (`level_service.curriculum`): both level sources draw by kind and say their replay
probability, domain randomisation is the level buffer at replay probability 0, and an editor written in tests/ and
named by `module:attribute` (the example of docs/guides/writing-a-curriculum.md, shown there word for word) runs in
the level service and in a training run, with no edit of the package."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from levelray.contracts.config import ConfigError, EnvConfig, LevelConfig, from_dict
from levelray.contracts.snapshot import packb, unpackb
from levelray.families.maze.level import EDITED_ID_BASE, MazeLevel, level_for_id
from levelray.level_service.buffer import LevelBuffer
from levelray.level_service.curriculum import LevelSource
from levelray.level_service.editors import check_editor
from levelray.level_service.sampler import LevelSampler
from levelray.level_service.service import LevelServiceCore
from tests.support import episode_results
from tests.wall_editor import WallEditor

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "guides" / "writing-a-curriculum.md"
WALLS = "tests.wall_editor:WallEditor"  # the editor of the guide, by its module:attribute
EMPTY = EnvConfig(id="maze:13x13", num_levels=0, maze_blocks="0")


def test_the_guide_shows_the_tested_example_and_how_to_name_it():
    text = GUIDE.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks[0] == (ROOT / "tests" / "wall_editor.py").read_text()
    assert f"--level-editor {WALLS}" in text  # the name this test runs it by
    assert "writing-a-curriculum.md" in (ROOT / "docs" / "guides" / "curricula.md").read_text()
    assert "guides/writing-a-curriculum.md" in (ROOT / "mkdocs.yml").read_text()


def test_a_child_gains_exactly_num_edits_walls_never_on_the_agent_or_the_goal():
    editor = WallEditor(13, 13, (0, 60), 5, queue_limit=10)
    rng = np.random.default_rng(0)
    for seed in range(40):
        parent = level_for_id(seed, 13, 13, (0, 60))
        child = editor.edit(parent, rng)
        gained = child.walls & ~parent.walls
        assert not (parent.walls & ~child.walls).any()  # no wall removed
        assert int(gained.sum()) == min(5, int((~parent.walls).sum()) - 2)
        for x, y in (parent.agent, parent.goal):
            assert not child.walls[y, x]
        assert (child.agent, child.agent_dir, child.goal) == (parent.agent, parent.agent_dir, parent.goal)


def _walls_config(**kw) -> LevelConfig:
    return LevelConfig(**{"strategy": "value_l1", "buffer_size": 8, "rho": 0.5, "replay_prob": 0.8, "robust": True,
                          "editor": WALLS, **kw})


def test_an_editor_named_by_module_attribute_runs_in_the_level_service_and_resumes(tmp_path):
    """Named by its module:attribute, the editor passes the run's checks, the service builds it from the config,
    plays its children first, and a snapshot brings the same editor back with its levels."""
    cfg = from_dict({"env": {"id": "maze:13x13", "num_levels": 0},
                     "levels": {"strategy": "value_l1", "robust": True, "editor": WALLS}})
    assert cfg.levels.editor == WALLS
    check_editor(cfg.env, cfg.levels)
    path = str(tmp_path / "levels.msgpack")
    # replay decided per episode (no level windows): each scored replay queues a child
    core = LevelServiceCore(None, _walls_config(window=0), env=EMPTY, rng=0, snapshot_path=path)
    assert isinstance(core._sampler.editor, WallEditor)
    ids, _, _ = core.draw_levels(8)
    core.report_episodes(episode_results(ids, np.arange(1.0, 9.0)))  # all 8 enter the buffer
    parents = {}
    for _ in range(40):  # replays (P = 0.8) are scored, each queues a child
        ids, replayed, _ = core.draw_levels(1)
        if replayed[0]:
            parents[ids[0]] = level_for_id(ids[0], 13, 13, (0, 0))
            core.report_episodes(episode_results(ids, [0.5]))
        if core.stats()["editor"]["queued"]:
            break
    ids, replayed, encodings = core.draw_levels(2)
    child = ids[0]
    assert child >= EDITED_ID_BASE and not replayed[0] and set(encodings) == {child}
    walls = MazeLevel.decode(encodings[child]).walls
    assert any(int((walls & ~p.walls).sum()) == 5 and not (p.walls & ~walls).any() for p in parents.values())
    core.report_episodes(episode_results([child], [100.0]))  # scores high: it enters the buffer
    assert core.stats()["editor"]["buffered"] == 1
    core.snapshot()
    resumed = LevelServiceCore(None, _walls_config(window=0), env=EMPTY, snapshot_path=path)
    assert isinstance(resumed._sampler.editor, WallEditor)
    assert packb(resumed.state_dict()) == packb(core.state_dict())
    assert resumed.draw_levels(16) == core.draw_levels(16)


def test_an_editor_that_does_not_exist_is_refused_naming_the_key_the_kind_and_what_exists(tmp_path):
    with pytest.raises(ConfigError, match="levels.editor"):
        from_dict({"levels": {"editor": "Wall Editor"}})
    for name, words in (("walls", r"--level-editor 'walls' \(levels.editor\): no level editor is called that; built "
                                  r"in: accel"),
                        ("tests.wall_editor:Nothing", "levels.editor.*has no level editor 'Nothing'"),
                        ("tests.no_such_module:WallEditor", "levels.editor.*cannot import 'tests.no_such_module'")):
        with pytest.raises(ConfigError, match=words):
            check_editor(EMPTY, _walls_config(editor=name))
        with pytest.raises(ValueError, match="levels.editor"):
            LevelServiceCore(None, _walls_config(editor=name), env=EMPTY, rng=0)


def test_a_state_written_with_one_editor_is_refused_by_another():
    core = LevelServiceCore(None, _walls_config(), env=EMPTY, rng=0)
    saved = unpackb(packb(core.state_dict()))
    accel = LevelServiceCore(None, _walls_config(editor="accel"), env=EMPTY, rng=0)
    before = packb(accel.state_dict())
    with pytest.raises(ValueError, match=f"written with level editor {WALLS}"):
        accel.load_state_dict(saved)
    assert packb(accel.state_dict()) == before


@pytest.mark.timeout(300)
def test_a_training_run_with_the_editor_named_by_module_attribute(tmp_path, one_thread):
    """An inline run from empty rooms edits with the example: its children enter the buffer as data."""
    from levelray.deploy.cli import main
    from levelray.deploy.rundir import RunDir
    from levelray.deploy.training.driver import load_resume_state

    run = tmp_path / "walls"
    args = ["train", "--backend", "inline", "--env", "maze:13x13", "--maze-blocks", "0", "--num-levels", "0",
            "--level-editor", WALLS, "--level-robust", "--level-strategy", "positive_value_loss",
            "--level-buffer-size", "2000", "--level-rho", "0.02", "--level-replay-prob", "0.8", "--num-actors", "1",
            "--envs-per-actor", "8", "--unroll-length", "20", "--level-window", "40", "--batch-size", "2",
            "--max-episode-steps", "30", "--total-steps", "12000", "--metrics-port", "0", "--report-interval", "0.5",
            "--quiet", "--tensorboard", "false", "--run-dir", str(run)]
    assert main(args) == 0
    last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["levels_edited"] > 0
    saved = load_resume_state(RunDir(run))["levels"]
    assert saved["config"]["editor"] == WALLS and saved["editor"]["counts"]["num_children"] > 0


# ----------------------------------------------------------------------------- the level source protocol


def _sources() -> dict[str, LevelSource]:
    fixed = LevelSampler(range(100, 110), LevelConfig(strategy="value_l1", rho=0.0, replay_schedule="fixed", nu=0.25),
                         rng=0)
    fixed.update_with_episodes(episode_results([100, 101, 102, 103], [0.5, 1.0, 2.0, 0.25]))
    buffer = LevelBuffer(1000, LevelConfig(strategy="value_l1", buffer_size=8, rho=0.0, replay_schedule="fixed",
                                           replay_prob=0.75), rng=0)
    buffer.update_with_episodes(episode_results([1000, 1001, 1002, 1003], [0.5, 1.0, 2.0, 0.25]))
    return {"fixed": fixed, "buffer": buffer}


@pytest.mark.parametrize("name", ["fixed", "buffer"])
def test_draws_by_kind_and_the_replay_probability(name):
    source = _sources()[name]
    held = {100, 101, 102, 103} if name == "fixed" else {1000, 1001, 1002, 1003}
    assert source.replay_probability() == 0.75
    ids, replayed = source.draw_many(200, "replay")
    assert replayed.all() and set(ids.tolist()) == held
    ids, replayed = source.draw_many(50, "new")
    assert not replayed.any() and not set(ids.tolist()) & held
    before = source.counters()
    ids, replayed = source.draw_many(4000, "any")
    assert abs(replayed.mean() - 0.75) < 0.03 and set(ids[replayed].tolist()) <= held
    after = source.counters()
    assert after["num_samples"] - before["num_samples"] == 4000
    assert after["num_replays"] - before["num_replays"] == int(replayed.sum())
    for n, kind in ((-1, "any"), (2, "explore")):
        with pytest.raises(ValueError, match="n must be" if n < 0 else "kind must be"):
            source.draw_many(n, kind)


def test_nothing_to_replay_gives_new_levels_and_unscored_sets_never_replay():
    empty = LevelBuffer(1000, LevelConfig(strategy="value_l1", buffer_size=8), rng=0)
    assert empty.replay_probability() == 0.0
    ids, replayed = empty.draw_many(5, "replay")
    assert not replayed.any() and len(set(ids.tolist())) == 5
    unseen = LevelSampler(range(10), LevelConfig(strategy="value_l1"), rng=0)
    assert unseen.replay_probability() == 0.0 and not unseen.draw_many(20, "replay")[1].any()
    for strategy in ("random", "sequential"):
        s = LevelSampler(range(10), LevelConfig(strategy=strategy), rng=0)
        assert s.replay_probability() == 0.0 and not s.draw_many(20, "replay")[1].any()
    proportionate = LevelSampler(range(10), LevelConfig(strategy="value_l1", rho=0.2), rng=0)
    proportionate.update_with_episodes(episode_results([0, 1, 2], [1.0, 1.0, 1.0]))
    assert proportionate.replay_probability() == pytest.approx(0.3)


def test_domain_randomisation_is_the_buffer_at_replay_probability_zero():
    """Every draw a new level, never one twice, whatever the buffer holds; results are taken as by any buffer."""
    dr = LevelBuffer(0, LevelConfig(strategy="value_l1", buffer_size=8, rho=0.0, replay_prob=0.0), rng=0)
    seen = []
    for _ in range(20):
        ids, replayed = dr.draw_many(50)
        assert not replayed.any()
        seen += ids.tolist()
        dr.update_with_episodes(episode_results(ids[:4], [1.0, 2.0, 3.0, 4.0]))
    assert dr.replay_probability() == 0.0 and dr.size == 8
    assert len(set(seen)) == len(seen) == 1000

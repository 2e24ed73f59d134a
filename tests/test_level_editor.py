"""ACCEL's level editor (`families.maze.editor`) and the way edited levels travel: children of replayed levels, ids
that never collide with seeds, unreachable goals dropped, the level buffer playing children first and scoring
them, encodings sent with the ids an actor draws, saved in snapshots and checked on restore, and an env
playing a level it only has as data. End to end on both backends with a resume, and the suite's evaluation."""

from __future__ import annotations

import json

import numpy as np
import pytest

from levelray.contracts.config import EnvConfig, LevelConfig, from_dict
from levelray.contracts.levels import MAX_SEED
from levelray.contracts.snapshot import packb, unpackb
from levelray.families.maze.editor import MazeEditor, edit_maze
from levelray.families.maze.level import EDITED_ID_BASE, MazeLevel, generate, is_seed, level_for_id, suite_names
from levelray.level_service.service import LevelServiceCore
from tests.support import episode_results

EMPTY = EnvConfig(id="maze:13x13", num_levels=0, maze_blocks="0")
# replay decided per episode (levels.window 0): a child is made as each replay's episode is scored
ACCEL = LevelConfig(strategy="value_l1", buffer_size=8, rho=0.5, replay_prob=0.8, robust=True, editor="accel",
                    num_edits=5, window=0)


def changed_cells(parent: MazeLevel, child: MazeLevel) -> int:
    """Cells whose content differs: walls flipped, plus the goal's old and new cell where it moved."""
    flipped = int(np.count_nonzero(parent.walls != child.walls))
    return flipped + (2 if parent.goal != child.goal else 0)


def episodes(ids, scores):
    """One finished episode per id, in that order, with the value_l1 score |scores| (an absolute value)."""
    return episode_results(ids, np.abs(np.asarray(scores, dtype=np.float64)))


def state_bytes(core: LevelServiceCore) -> bytes:
    return packb(core.state_dict())


@pytest.mark.parametrize("num_edits", [1, 5, 20])
def test_children_change_at_most_num_edits_cells_and_keep_the_agent(num_edits):
    rng = np.random.default_rng(num_edits)
    moved = 0
    for seed in range(200):
        parent = generate(seed, 13, 13, (0, 60))
        child = edit_maze(parent, num_edits, rng)
        # edited cells change walls; a goal removed by an edit lands on one more cell, drawn from the floor
        assert int(np.count_nonzero(parent.walls != child.walls)) <= num_edits
        assert changed_cells(parent, child) <= num_edits + 2
        assert (child.agent, child.agent_dir) == (parent.agent, parent.agent_dir)
        assert not child.walls[child.goal[1], child.goal[0]] and not child.walls[child.agent[1], child.agent[0]]
        moved += parent.goal != child.goal
    if num_edits >= 5:
        assert moved > 0.8 * 200  # at least 1 - (2/3)^5 = 0.87 of children move the goal


def test_one_edit_is_distributed_as_hand_computed():
    """An empty 3x3 room, agent (0, 0), goal (2, 2), one edit: the edited cell is one of the 8 others (1/8 each),
    its kind wall, floor or goal (1/3 each). The goal's own cell made wall or floor removes the goal, which lands
    on a floor cell other than the agent's (7 after a wall, 8 after floor, its old cell among them).
      P(a wall added)         = 1/3                                           (any of the 8 cells made wall)
      P(the goal moves)       = 1/8 (1/3 + 1/3 * 7/8) + 7/8 * 1/3 = 71/192   (its cell edited, or another made goal)
      P(child == parent)      = 1/8 (1/3 * 1/8 + 1/3) + 7/8 * 1/3 = 65/192   (floor on floor, goal on goal)"""
    parent = MazeLevel.from_text("\n".join([">..", "...", "..G"]))
    rng = np.random.default_rng(7)
    n = 20_000
    walls = moved = same = 0
    for _ in range(n):
        child = edit_maze(parent, 1, rng)
        walls += int(child.walls.sum())
        moved += child.goal != parent.goal
        same += child == parent
        assert child.agent == parent.agent and not child.walls[0, 0]
    for k, p in ((walls, 1 / 3), (moved, 71 / 192), (same, 65 / 192)):
        assert abs(k - n * p) <= 4.0 * (n * p * (1 - p)) ** 0.5, (k, n * p)


def test_children_of_an_empty_room_add_num_edits_over_3_walls():
    """In an empty room every edited cell is floor or the goal, so each becomes a wall with probability 1/3:
    5 edits add 5/3 walls per child on average."""
    parent = generate(0, 13, 13, (0, 0))
    assert parent.num_walls == 0
    rng = np.random.default_rng(3)
    n = 4000
    added = np.array([edit_maze(parent, 5, rng).num_walls for _ in range(n)])
    # per child: Binomial(5, 1/3), variance 5 * 2/9
    assert abs(added.mean() - 5 / 3) <= 4.0 * (5 * 2 / 9 / n) ** 0.5


def test_child_ids_never_collide_with_seeds_and_are_held_as_data():
    editor = MazeEditor(13, 13, (0, 0), 5, queue_limit=100)
    rng = np.random.default_rng(0)
    ids = [editor.make_child(seed, rng) for seed in range(50)]
    ids = [i for i in ids if i is not None]
    assert ids == list(range(EDITED_ID_BASE, EDITED_ID_BASE + len(ids)))
    assert min(ids) > MAX_SEED and not any(is_seed(i) for i in ids)
    with pytest.raises(ValueError, match="edited levels"):
        level_for_id(ids[0], 13, 13, (0, 0))  # only the level service's editor resolves them
    child = editor.level(ids[0])
    assert child.encode() == editor.encodings[ids[0]]
    assert changed_cells(generate(0, 13, 13, (0, 0)), child) <= 6
    # a child of a child: edited levels are parents too
    grandchild = editor.make_child(ids[0], rng)
    assert grandchild is None or changed_cells(child, editor.level(grandchild)) <= 6
    with pytest.raises(ValueError, match="does not hold"):
        editor.level(EDITED_ID_BASE + 10**6)


@pytest.mark.parametrize("drop", [False, True])
def test_a_child_whose_goal_is_unreachable_is_kept_unless_dropped(drop):
    # the goal in a corner with one open neighbour: walling that one cell cuts it off (1 child in 24 edits that
    # cell, 1 in 3 of those walls it: 1 child in 72)
    parent = MazeLevel.from_text("\n".join(["...#G", ".....", ".....", ".....", ">...."]))
    editor = MazeEditor(5, 5, (0, 0), 1, queue_limit=10_000, drop_unsolvable=drop)
    editor.encodings[EDITED_ID_BASE] = parent.encode()
    editor.next_index = 1
    rng = np.random.default_rng(1)
    made = [editor.make_child(EDITED_ID_BASE, rng) for _ in range(1500)]
    unsolvable = editor.counts["num_unsolvable"]
    assert unsolvable > 0 and editor.counts["num_children"] == 1500
    from levelray.families.maze.level import shortest_path_length
    kept = [i for i in made if i is not None]
    reachable = [shortest_path_length(editor.level(i)) is not None for i in kept]
    if drop:
        assert made.count(None) == unsolvable and all(reachable) and len(editor.queue) == 1500 - unsolvable
    else:
        assert None not in made and reachable.count(False) == unsolvable and len(editor.queue) == 1500


def test_drop_unsolvable_is_the_run_configs_and_survives_a_state_round_trip():
    levels = from_dict({"levels": {"drop_unsolvable": True}}).levels
    assert levels.drop_unsolvable and not LevelConfig().drop_unsolvable
    editor = MazeEditor.for_run(EMPTY, levels)
    assert editor.drop_unsolvable and editor.num_edits == 5 and editor.queue_limit == levels.buffer_size
    assert MazeEditor.from_state_dict(unpackb(packb(editor.state_dict()))).drop_unsolvable


def test_the_buffer_edits_replays_and_plays_children_first():
    core = LevelServiceCore(None, ACCEL, env=EMPTY, rng=0)
    ids, replayed, encodings = core.draw_levels(8)  # nothing buffered: all new seeds
    assert not any(replayed) and all(is_seed(i) for i in ids) and encodings == {}
    core.report_episodes(episodes(ids, np.arange(8.0)))  # all 8 enter the buffer
    assert core.stats()["levels_edited"] == 0  # new levels are not edited, replays are
    first = None
    for _ in range(20):  # until a replay is drawn (P = 0.8 per draw)
        ids, replayed, _ = core.draw_levels(1)
        if replayed[0]:
            first = ids[0]
            break
    assert first is not None
    core.report_episodes(episodes([first], [0.5]))  # a replay scored: one child queued
    stats = core.stats()
    assert stats["levels_edited"] == 1 and stats["editor"]["queued"] == 1
    ids, replayed, encodings = core.draw_levels(3)
    child = ids[0]
    assert child >= EDITED_ID_BASE and not replayed[0] and set(encodings) == {child}  # the child comes first
    assert changed_cells(generate(first, 13, 13, (0, 0)), MazeLevel.decode(encodings[child])) <= 6
    core.report_episodes(episodes([child], [100.0]))  # the child's episode scores high: it enters
    view = core.state_dict()
    assert child in view["seeds"][: view["size"]].tolist()
    assert core.stats()["editor"]["buffered"] == 1


def test_unknown_edited_ids_are_rejected_and_change_nothing():
    core = LevelServiceCore(None, ACCEL, env=EMPTY, rng=0)
    ids, _, _ = core.draw_levels(8)
    before = state_bytes(core)
    for bad in (EDITED_ID_BASE + 7, MAX_SEED, -1):
        with pytest.raises(ValueError, match=f"level id {bad}"):
            core.report_episodes(episodes([ids[0], bad], [1.0, 1.0]))
        assert state_bytes(core) == before


def busy_service(n_rounds: int = 40) -> LevelServiceCore:
    """A service after `n_rounds` of 4 one-step episodes with random scores."""
    core = LevelServiceCore(None, ACCEL, env=EMPTY, rng=0)
    rng = np.random.default_rng(0)
    for _ in range(n_rounds):
        ids, _, _ = core.draw_levels(4)
        core.report_episodes(episodes(ids, rng.normal(size=4)))
    stats = core.stats()
    assert stats["levels_edited"] > 10 and stats["editor"]["buffered"] > 0
    return core


def test_state_round_trip_holds_every_encoding_and_resumes_exactly():
    core = busy_service()
    saved = unpackb(packb(core.state_dict()))
    editor_state = saved["editor"]
    buffered = saved["seeds"][: saved["size"]]
    assert {int(i) for i in buffered if i >= EDITED_ID_BASE} <= set(editor_state["ids"].tolist())
    restored = LevelServiceCore(None, ACCEL, env=EMPTY, rng=99, initial_state=saved)
    assert state_bytes(restored) == state_bytes(core)
    assert restored.draw_levels(50) == core.draw_levels(50)
    assert restored.stats()["levels_mean_walls"] == core.stats()["levels_mean_walls"]


def test_a_state_missing_an_encoding_or_from_another_family_is_refused():
    core = busy_service()
    saved = core.state_dict()
    edited = [i for i in saved["seeds"][: saved["size"]].tolist() if i >= EDITED_ID_BASE]
    broken = unpackb(packb(saved))
    keep = broken["editor"]["ids"] != edited[0]
    broken["editor"]["encodings"] = [e for e, k in zip(broken["editor"]["encodings"], keep, strict=True) if k]
    broken["editor"]["ids"] = broken["editor"]["ids"][keep]
    with pytest.raises(ValueError, match="level ids"):
        LevelServiceCore(None, ACCEL, env=EMPTY, rng=0, initial_state=broken)
    malformed = unpackb(packb(saved))
    malformed["editor"]["encodings"][0] = malformed["editor"]["encodings"][0][:-1]  # truncated
    before = state_bytes(core)
    with pytest.raises(ValueError, match="maze encoding truncated"):
        core.load_state_dict(malformed)
    assert state_bytes(core) == before  # the service keeps its state
    plain = LevelConfig(strategy="value_l1", buffer_size=8, rho=0.5, robust=True)
    with pytest.raises(ValueError, match="level editor accel"):
        LevelServiceCore(None, plain, env=EMPTY, rng=0, initial_state=unpackb(packb(saved)))
    other = EnvConfig(id="maze:11x11", num_levels=0, maze_blocks="0")
    with pytest.raises(ValueError, match="11x11"):
        LevelServiceCore(None, ACCEL, env=other, rng=0, initial_state=unpackb(packb(saved)))


def _checked_before_a_run(cfg) -> list:
    """The editor's problems a run is refused with before it starts: the run config's (`contracts.validate`) and the
    editor's own of its env family (`level_service.editors.editor_problems`, from `prepare_run_dir`)."""
    from levelray.contracts.validate import problems
    from levelray.level_service.editors import editor_problems

    found = problems(cfg)
    own = editor_problems(cfg.levels.editor, cfg.env, unbounded=cfg.env.num_levels == 0)
    return [*[p for p in own if p not in found], *found]


def test_config_checks_name_what_the_editor_needs():

    base = {"env": {"id": "maze:13x13", "num_levels": 0, "maze_blocks": "0"},
            "levels": {"strategy": "value_l1", "robust": True, "editor": "accel"}}
    assert _checked_before_a_run(from_dict(base)) == []
    for change, paths in (
        ({"env": {"id": "minigrid:Empty-5x5"}}, ("levels.editor", "env.id")),
        ({"env": {"num_levels": 100}}, ("levels.editor", "env.num_levels")),
        ({"levels": {"strategy": "random"}}, ("levels.editor", "levels.strategy")),
        ({"levels": {"robust": False}}, ("levels.editor", "levels.robust")),
    ):
        cfg = {section: {**base[section], **change.get(section, {})} for section in base}
        found = [p for p in _checked_before_a_run(from_dict(cfg)) if "levels.editor" in p.paths]
        assert [p.paths for p in found] == [paths], change
    with pytest.raises(Exception, match="num_edits"):
        from_dict({"levels": {"num_edits": 0}})


def test_the_level_service_refuses_an_editor_without_its_level_space_as_the_config_does():
    """What the editor needs of the level space (a maze family, unbounded) is one rule: the level service refuses
    with the words a run is refused with before it starts, and takes the rest of ACCEL's settings as given."""
    base = {"env": {"id": "maze:13x13", "num_levels": 0, "maze_blocks": "0"},
            "levels": {"strategy": "value_l1", "robust": True, "editor": "accel"}}
    for env in ({"id": "minigrid:Empty-5x5"}, {"num_levels": 100}, {"id": "CartPole-v1", "num_levels": 20}):
        cfg = from_dict({"env": {**base["env"], **env}, "levels": base["levels"]})
        words = [p.message for p in _checked_before_a_run(cfg) if "levels.editor" in p.paths]
        assert words and all("levels.editor accel needs" in w for w in words), env
        seeds = None if cfg.env.num_levels == 0 else range(cfg.env.num_levels)
        with pytest.raises(ValueError) as refused:
            LevelServiceCore(seeds, cfg.levels, env=cfg.env)
        assert str(refused.value) == "; ".join(words)
    with pytest.raises(ValueError, match=r"levels\.editor accel needs a maze family \(--env maze:<W>x<H>\), not None"):
        LevelServiceCore(None, ACCEL)
    LevelServiceCore(None, ACCEL, env=EMPTY)


def test_level_draws_keep_the_encodings_still_needed():
    from levelray.actors.env_vector import LevelDraws

    draws = LevelDraws(num_envs=2)
    draws.playing[:] = [EDITED_ID_BASE, EDITED_ID_BASE + 1]
    draws.remember({EDITED_ID_BASE + i: bytes([i]) for i in range(100)}, queued=[EDITED_ID_BASE + 99])
    assert len(draws.encodings) == 100  # all just arrived: none forgotten yet
    for i in range(100, 160):  # one at a time, as the inline backend hands them out, each played at once
        draws.remember({EDITED_ID_BASE + i: bytes([i % 256])}, queued=[EDITED_ID_BASE + 99])
        assert EDITED_ID_BASE + i in draws.encodings
        draws.playing[i % 2] = EDITED_ID_BASE + i
    assert set(draws.encodings) <= {EDITED_ID_BASE + i for i in (0, 1, 99, *range(100, 160))}
    assert {EDITED_ID_BASE + 99, EDITED_ID_BASE + 158, EDITED_ID_BASE + 159} <= set(draws.encodings)
    assert len(draws.encodings) < 80  # bounded: the ones no env plays any more are forgotten


def test_a_maze_env_plays_a_level_it_only_has_as_data():
    from levelray.actors.env_vector import LevelDraws
    from levelray.families.maze.env import make_vector

    level = MazeLevel.from_text("\n".join(["#" * 12 + ".", *(["." * 13] * 11), "G" * 1 + "." * 11 + "<"]))

    class OneEditedLevel(LevelDraws):
        def next_level(self):
            self.remember({EDITED_ID_BASE + 5: level.encode()})
            return EDITED_ID_BASE + 5, False

    draws = OneEditedLevel(1)
    vec = make_vector(EMPTY, 1, draws, seed=0)
    try:
        vec.reset()
        assert vec.current_levels().tolist() == [EDITED_ID_BASE + 5]
        assert vec.levels[0] == level
    finally:
        vec.close()


def e2e_args(backend: str, run_dir, steps: int) -> list[str]:
    """A buffer that does not fill in the run: every child whose episode is scored enters it. (In a full buffer
    of fresh levels a child must out-score the lowest, which an agent of a few seconds' training seldom lets it
    do: measured on Ray, no child in a full 24-level buffer at 12k steps, none in a full 400-level one at 32k.)
    On Ray the actor, stepping mazes as arrays, plays its first thousands of steps before the first scores come
    back, on fresh levels drawn up to a second ahead (`actors.env_actor.SeedPrefetcher`): 32k steps fill ~1,000
    slots, and replays, and so children, start only after that; actors send episode results every 0.5 s, which
    delays them by as much again, so the Ray run takes 64k steps (the inline one 32k). Replay is
    decided per episode (`--level-window 0`): a 256-step window would score 8 new levels per 2,080 steps, and fill
    the 100 levels replay waits for only near the run's end."""
    return ["train", "--backend", backend, "--env", "maze:13x13", "--maze-blocks", "0", "--num-levels", "0",
            "--level-window", "0",
            "--level-editor", "accel", "--level-robust", "--level-strategy", "positive_value_loss",
            "--level-buffer-size", "2000", "--level-rho", "0.05", "--level-replay-prob", "0.8", "--num-actors", "1",
            "--envs-per-actor", "8", "--unroll-length", "20", "--batch-size", "2", "--max-episode-steps", "30",
            "--total-steps", str(steps), "--metrics-port", "0", "--report-interval", "0.5", "--quiet",
            "--tensorboard", "false", "--run-dir", str(run_dir)]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["inline", "ray"])
def test_accel_run_end_to_end(backend, tmp_path, capsys, one_thread, request):
    """A short ACCEL run from empty rooms (32k steps inline, 64k on Ray): its buffer holds edited levels, their
    complexity and `levels_edited` are logged; the suite evaluates with one level set per maze; the service a
    resume builds is exactly the checkpoint's buffer with its encodings. The inline run then also draws the report
    (its gallery shows edited levels) and resumes."""
    from levelray.deploy.cli import main
    from levelray.deploy.rundir import RunDir
    from levelray.deploy.training.components import make_level_service
    from levelray.deploy.training.driver import load_resume_state

    if backend == "ray":
        request.getfixturevalue("ray_session")
    run = tmp_path / "accel"
    assert main(e2e_args(backend, run, 32_000 if backend == "inline" else 64_000)) == 0
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    last = records[-1]
    assert last["levels_edited"] > 0 and last["levels_mean_walls"] is not None
    saved = load_resume_state(RunDir(run))["levels"]
    buffered = saved["seeds"][: saved["size"]].tolist()
    edited = [i for i in buffered if i >= EDITED_ID_BASE]
    assert edited, "no edited level entered the buffer"
    assert set(edited) <= set(saved["editor"]["ids"].tolist())
    import yaml

    cfg = from_dict(yaml.safe_load((run / "config.yaml").read_text()))
    assert packb(make_level_service(cfg, saved).state_dict()) == packb(saved)  # what a resume starts from

    capsys.readouterr()
    assert main(["evaluate", str(run), "--levels", "maze-suite", "--episodes", "2", "--json", "--backend",
                 "inline"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["maze_suite"]["mazes"] == suite_names()
    assert all(0 <= result["results"][name]["success_rate"] <= 1 for name in suite_names())

    if backend == "ray":  # the report and the resume read only the run directory: once, on the inline run
        return
    # the report draws the buffer's levels, edited ones from their encodings, and the suite
    assert main(["report", str(run), "--out", str(tmp_path / "report"), "--json"]) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["maze_suite"]["series"] == suite_names()
    points = figures["level_gallery"]["galleries"][0]["points"]
    drawn = [level["seed"] for point in points for level in point["most"] + point["least"]]
    assert any(level_id >= EDITED_ID_BASE for level_id in drawn)
    for path in [figures["maze_suite"]["path"], *(point["path"] for point in points)]:
        with open(path, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"

    # resume: the run goes on from the saved buffer (its encodings included), and edits on
    assert main(["train", "--resume", str(run), "--total-steps", "20000", "--quiet"]) == 0
    after = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert after[-1]["levels_edited"] >= last["levels_edited"]
    assert after[-1]["env_steps"] >= 20_000

"""Mazes a user brings (`families.maze.files`, `levelray evaluate --levels maze-file:PATH`): a text file or a folder
of them read into named levels, malformed files refused naming the file, line and character, the level sets they
become, and a trained maze policy evaluated on them (inline and on Ray, with a video)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from levelray.contracts.config import ConfigError, RunConfig, replace_paths
from levelray.deploy.cli import main
from levelray.deploy.evaluation.evaluate import evaluate_checkpoint, format_result
from levelray.deploy.evaluation.level_sets import parse_level_sets, plan_level_sets
from levelray.families.maze.files import read_maze_file, read_maze_files
from levelray.families.maze.level import FILE_ID_BASE, MazeLevel, suite_level, suite_names
from tests.support import TINY_INLINE_RUN, json_output

CORRIDOR = """\
; A corridor: the goal at the far end.
; Shortest path: 12 moves.

>...........G
#############
#############
"""


def _write(folder, name: str, text: str | bytes):
    path = folder / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def test_a_file_and_a_folder_read_into_named_levels(tmp_path):
    path = _write(tmp_path, "corridor.txt", CORRIDOR)
    assert read_maze_file(path) == MazeLevel.from_text(CORRIDOR)
    assert read_maze_files(path) == {path: MazeLevel.from_text(CORRIDOR)}
    folder = tmp_path / "mazes"
    folder.mkdir()
    for name in ("spiral", "comb"):
        _write(folder, f"{name}.txt", suite_level(name).to_text())
    _write(folder, "README.md", "not a maze: only .txt files are read")
    mazes = read_maze_files(folder)
    assert [p.stem for p in mazes] == ["comb", "spiral"]  # name order
    assert [mazes[p] for p in mazes] == [suite_level("comb"), suite_level("spiral")]


@pytest.mark.parametrize("text, where", [
    (CORRIDOR.replace(">...........G", ">.....x.....G"), "line 4 character 7: unknown cell 'x'"),
    (CORRIDOR.replace("#############\n#############", "#############\n##########"),
     "line 6 character 11: the row has 10 cells, the first row \\(line 4\\) has 13"),
    (CORRIDOR.replace("#############\n#", "#######>#####\n#"),
     "must have exactly one agent .* found 2: line 4 character 1, line 5 character 8"),
    (CORRIDOR.replace("G", "."), "must have exactly one goal \\(G\\), found 0: none in lines 4-6"),
    ("; nothing but a comment\n", "has no grid rows"),
    (">G\n..\n", "line 1 character 1: MazeLevel.width must be an int in \\[3, 63\\], got 2"),
    (CORRIDOR.encode().replace(b">.", b">\xff"), "line 4 character 2: not UTF-8 text \\(byte 0xff\\)"),
])
def test_a_malformed_file_is_refused_naming_the_file_line_and_character(tmp_path, text, where):
    path = _write(tmp_path, "bad.txt", text)
    with pytest.raises(ValueError, match=re.escape(f"maze file {path} ") + where):
        read_maze_file(path)
    with pytest.raises(ConfigError, match=re.escape(f"--levels maze-file:{path}: maze file {path} ") + where):
        parse_level_sets(f"train,maze-file:{path}")


def test_missing_paths_and_empty_folders_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="maze file .*nope.txt does not exist"):
        parse_level_sets(f"maze-file:{tmp_path / 'nope.txt'}")
    with pytest.raises(ConfigError, match="maze folder .* has no .txt files"):
        parse_level_sets(f"maze-file:{tmp_path}")
    with pytest.raises(ConfigError, match="expected maze-file:PATH"):
        parse_level_sets("maze-file:")


def test_each_file_is_a_level_set_of_its_own_played_from_its_encoding(tmp_path):
    folder = tmp_path / "mazes"
    folder.mkdir()
    for name in ("spiral", "comb"):
        _write(folder, f"{name}.txt", suite_level(name).to_text())
    corridor = _write(tmp_path, "corridor.txt", CORRIDOR)
    cfg = replace_paths(RunConfig(), {"env.id": "maze:13x3"})
    plan = plan_level_sets(cfg, parse_level_sets(f"maze-file:{corridor}"), episodes=3)
    assert [(s.name, s.seeds.tolist(), s.file, s.suite) for s in plan] == [("corridor", [FILE_ID_BASE], str(corridor),
                                                                           False)]
    assert MazeLevel.decode(plan[0].encodings[FILE_ID_BASE]) == MazeLevel.from_text(CORRIDOR)
    with pytest.raises(ConfigError, match=f"maze file {folder / 'comb.txt'} is 13x13, this run's env is maze:13x3"):
        plan_level_sets(cfg, [f"maze-file:{folder}"], episodes=3)
    big = replace_paths(RunConfig(), {"env.id": "maze:13x13"})
    plan = plan_level_sets(big, ["maze-suite:labyrinth", f"maze-file:{folder}", "maze-25"], episodes=3)
    assert [s.name for s in plan] == ["labyrinth", "comb", "spiral", "maze-25"]
    assert [s.seeds.tolist() for s in plan[1:3]] == [[FILE_ID_BASE], [FILE_ID_BASE + 1]]
    assert {i for s in plan for i in s.encodings} == {FILE_ID_BASE, FILE_ID_BASE + 1}
    with pytest.raises(ConfigError, match="named 'comb' \\(the suite's maze and maze file .*comb.txt\\)"):
        plan_level_sets(big, ["maze-suite", f"maze-file:{folder}"], episodes=3)
    with pytest.raises(ConfigError, match="maze level sets need a maze run"):
        plan_level_sets(replace_paths(RunConfig(), {"env.id": "CartPole-v1"}), [f"maze-file:{corridor}"], 3)


def test_evaluate_plays_the_mazes_a_user_brings(tmp_path, capsys, one_thread, ray_session):
    """A short maze run evaluated on a folder of mazes (two suite mazes and one more) and the suite: each file is
    `results.<name>`, played on its file's level; the Ray backend gives the same; a video of a file's maze."""
    run = tmp_path / "run"
    assert main(["train", *TINY_INLINE_RUN, "--env", "maze:13x13", "--total-steps", "600", "--max-episode-steps",
                 "12", "--tensorboard", "false", "--run-dir", str(run)]) == 0
    folder = tmp_path / "my mazes"
    folder.mkdir()
    for name in ("spiral", "open_room"):
        _write(folder, f"mine_{name}.txt", suite_level(name).to_text())
    capsys.readouterr()
    assert main(["evaluate", str(run), "--levels", f"maze-suite,maze-file:{folder}", "--episodes", "3",
                 "--num-envs", "2", "--greedy", "--json"]) == 0
    out = json_output(capsys.readouterr().out)
    results = out["results"]
    assert list(results) == [*suite_names(), "mine_open_room", "mine_spiral"]
    assert out["maze_files"] == {"mine_open_room": str(folder / "mine_open_room.txt"),
                                 "mine_spiral": str(folder / "mine_spiral.txt")}
    assert out["maze_suite"]["mazes"] == suite_names()  # the files are not in the suite's mean
    for name, suite_name, level_id in (("mine_open_room", "open_room", FILE_ID_BASE),
                                       ("mine_spiral", "spiral", FILE_ID_BASE + 1)):
        r = results[name]
        assert r["episodes"] == 3 and r["seeds"] == [level_id] * 3 and 0.0 <= r["success_rate"] <= 1.0
        # the same level, the same greedy policy: the file's maze plays as the suite's does
        assert r["returns"] == results[suite_name]["returns"]
    assert "maze file mine_spiral" in format_result(out)
    on_ray = evaluate_checkpoint(run, [f"maze-file:{folder}"], episodes=3, num_envs=2, greedy=True, backend="ray")
    assert {n: r["returns"] for n, r in on_ray["results"].items()} == {n: results[n]["returns"]
                                                                       for n in ("mine_open_room", "mine_spiral")}
    with_video = evaluate_checkpoint(run, [f"maze-file:{folder / 'mine_spiral.txt'}"], episodes=1, greedy=True,
                                     video_dir=tmp_path / "videos")
    (video,) = with_video["videos"]
    assert video["level_set"] == "mine_spiral" and video["seed"] == FILE_ID_BASE and video["frames"] >= 1
    assert np.isclose(video["return"], results["mine_spiral"]["returns"][0])
    bad = _write(tmp_path, "bad.txt", CORRIDOR.replace("G", "Q"))
    with pytest.raises(SystemExit):
        main(["evaluate", str(run), "--levels", f"maze-file:{bad}"])
    assert f"maze file {bad} line 4 character 13: unknown cell 'Q'" in capsys.readouterr().err

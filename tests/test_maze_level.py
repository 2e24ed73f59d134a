"""The maze family's level data (`levelray.families.maze.level`): the encoding, the text form, the seed generator,
shortest paths, the level-id ranges and the hand-designed test suite. Pure NumPy: no MiniGrid, no Ray."""

from __future__ import annotations

import copy
import pickle
from collections import deque
from importlib import resources

import numpy as np
import pytest

from levelray.contracts.levels import MAX_SEED
from levelray.families.maze import level as maze
from levelray.families.maze.level import (
    EDITED_ID_BASE,
    ENCODING_VERSION,
    LEVEL_ID_BASE,
    SUITE_ID_BASE,
    MazeLevel,
    generate,
    level_for_id,
    parse_blocks,
    render_rgb,
    shortest_path_length,
    suite_level,
    suite_level_id,
    suite_name_for_id,
    suite_names,
)


def _random_level(rng: np.random.Generator) -> MazeLevel:
    width, height = (int(v) for v in rng.integers(maze.MIN_SIZE, maze.MAX_SIZE + 1, size=2))
    walls = rng.random((height, width)) < rng.random()
    free = np.flatnonzero(~walls)
    if len(free) < 2:
        walls.reshape(-1)[:2] = False
        free = np.flatnonzero(~walls)
    agent, goal = rng.choice(free, size=2, replace=False)
    return MazeLevel(width, height, walls, (agent % width, agent // width), int(rng.integers(4)),
                     (goal % width, goal // width))


def test_encoding_round_trips_on_many_random_levels():
    rng = np.random.default_rng(0)
    for _ in range(300):
        level = _random_level(rng)
        data = level.encode()
        assert len(data) == 8 + (level.width * level.height + 7) // 8
        back = MazeLevel.decode(data)
        assert back == level and hash(back) == hash(level)
        assert np.array_equal(back.walls, level.walls)
        assert (back.agent, back.agent_dir, back.goal) == (level.agent, level.agent_dir, level.goal)


def test_a_13x13_encoding_is_small_and_starts_with_the_version():
    level = generate(3, 13, 13, (25, 25))
    data = level.encode()
    assert len(data) == 30 < 100
    assert data[0] == ENCODING_VERSION and data[1:3] == bytes((13, 13))


def test_levels_are_immutable_values():
    level = generate(5, 13, 13, (0, 60))
    with pytest.raises(ValueError):
        level.walls[0, 0] = not level.walls[0, 0]
    with pytest.raises(AttributeError):
        level.goal = (0, 0)
    walls = np.zeros((5, 5), dtype=bool)
    built = MazeLevel(5, 5, walls, (0, 0), 0, (4, 4))
    walls[2, 2] = True  # the caller's array is copied, not shared
    assert built.num_walls == 0
    assert built == MazeLevel(5, 5, np.zeros((5, 5), int), [0, 0], 0, np.array([4, 4]))
    assert built != MazeLevel(5, 5, walls, (0, 0), 0, (4, 4))
    assert len({built, MazeLevel.decode(built.encode()), level}) == 2
    for other in (pickle.loads(pickle.dumps(level)), copy.deepcopy(level)):
        assert other == level and not other.walls.flags.writeable


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: bytes([ENCODING_VERSION + 1]) + d[1:], "version 2 is not supported"),
        (lambda d: d[:-1], "truncated: 29 bytes, a 13x13 maze takes 30"),
        (lambda d: d[:5], "truncated: 5 bytes, the header alone is 8"),
        (lambda d: d + b"\x00", "extra bytes: 31 bytes, a 13x13 maze takes 30"),
        (lambda d: d[:1] + bytes([2]) + d[2:], "width 2 is outside \\[3, 63\\]"),
        (lambda d: d[:-1] + bytes([d[-1] | 1]), "non-zero padding bits"),
        (lambda d: d[:3] + bytes([13]) + d[4:], "MazeLevel.agent must be inside the 13x13 inner grid"),
        (lambda d: d[:5] + bytes([4]) + d[6:], "MazeLevel.agent_dir must be an int in 0..3"),
    ],
)
def test_decode_rejects_bad_bytes_and_names_what_is_wrong(mutate, message):
    data = suite_level("spiral").encode()
    with pytest.raises(ValueError, match=message):
        MazeLevel.decode(mutate(data))


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(width=2), "MazeLevel.width must be an int in \\[3, 63\\]"),
        (dict(walls=np.zeros((4, 5), bool)), "MazeLevel.walls must be a \\[height, width\\]"),
        (dict(walls=np.full((5, 5), 2)), "only 0/1"),
        (dict(agent=(5, 0)), "MazeLevel.agent must be inside the 5x5 inner grid"),
        (dict(goal="44"), "MazeLevel.goal must be an \\(x, y\\) pair of ints"),
        (dict(agent_dir=4), "MazeLevel.agent_dir must be an int in 0..3"),
        (dict(agent=(4, 4)), "must be different cells"),
        (dict(walls=np.eye(5, dtype=bool)), "MazeLevel.agent \\(0, 0\\) is on a wall"),
    ],
)
def test_invalid_levels_raise_naming_the_field(kwargs, field):
    args = dict(width=5, height=5, walls=np.zeros((5, 5), bool), agent=(0, 0), agent_dir=0, goal=(4, 4))
    with pytest.raises(ValueError, match=field):
        MazeLevel(**{**args, **kwargs})


def test_text_round_trip_and_agent_forms():
    text = "#..G\n.A#.\n....\n"
    level = MazeLevel.from_text(text, agent_dir=3)
    assert (level.width, level.height, level.agent, level.agent_dir, level.goal) == (4, 3, (1, 1), 3, (3, 0))
    assert level.walls.tolist() == [[True, False, False, False], [False, False, True, False], [False] * 4]
    assert level.to_text() == "#..G\n.^#.\n....\n"
    assert MazeLevel.from_text(level.to_text()) == level
    assert MazeLevel.from_text("; a comment\n\n<.G\n...\n...\n", agent_dir=0).agent_dir == 2  # the arrow wins
    rng = np.random.default_rng(1)
    for _ in range(50):
        random_level = _random_level(rng)
        assert MazeLevel.from_text(random_level.to_text()) == random_level


@pytest.mark.parametrize(
    "text, message",
    [
        ("A.G\n...\n..\n", "row 3 has 2 cells, row 1 has 3"),
        ("A.G\n.x.\n...\n", "row 2 column 2: unknown cell 'x'"),
        ("A.G\n.A.\n...\n", "exactly one agent .* found 2: row 1 column 1, row 2 column 2"),
        ("A..\n...\n...\n", "exactly one goal \\(G\\), found 0: none"),
        ("; only a comment\n", "no grid rows"),
    ],
)
def test_from_text_errors_name_the_row_and_column(text, message):
    with pytest.raises(ValueError, match=message):
        MazeLevel.from_text(text)


def test_mirrored_flips_columns_and_the_agents_left_and_right():
    level = MazeLevel.from_text("""
        >.#.
        ..#G
        .#..
    """.replace(" ", ""))
    assert level.mirrored().to_text() == ".#.<\nG#..\n..#.\n"
    for arrow, facing in (("v", "v"), ("^", "^"), ("<", ">")):
        text = f"{arrow}..G\n....\n.#..\n"
        assert MazeLevel.from_text(text).mirrored().to_text() == f"G..{facing}\n....\n..#.\n"


def test_mirroring_twice_is_the_identity_and_keeps_every_shortest_path():
    for seed in range(40):
        level = generate(seed, 13, 13, (0, 60))
        mirror = level.mirrored()
        assert mirror.mirrored() == level
        assert mirror.num_walls == level.num_walls
        assert shortest_path_length(mirror) == shortest_path_length(level)
        assert mirror.walls[:, 0].tolist() == level.walls[:, -1].tolist()


def test_generate_is_deterministic_per_seed_and_differs_across_seeds():
    levels = [generate(seed, 13, 13, (0, 60)) for seed in range(40)]
    assert levels == [generate(seed, 13, 13, (0, 60)) for seed in range(40)]
    assert len({level.encode() for level in levels}) == 40
    # One seed means one level across processes and releases of this code (NumPy is pinned).
    pinned = "010d0d000801000aa210002001040000201100990c008814010200600800"
    assert generate(0, 13, 13, (25, 25)).encode().hex() == pinned


def test_generated_levels_respect_the_block_range_and_place_agent_and_goal_on_free_cells():
    for seed in range(200):
        level = generate(seed, 13, 13, (10, 40))
        assert 10 <= level.num_walls <= 40
        assert not level.walls[level.agent[1], level.agent[0]] and not level.walls[level.goal[1], level.goal[0]]
        assert level.agent != level.goal and 0 <= level.agent_dir <= 3
    counts = {generate(seed, 13, 13, (0, 60)).num_walls for seed in range(300)}
    assert min(counts) <= 5 and max(counts) >= 55  # the count is drawn over the whole range
    assert all(generate(seed, 7, 5, (25, 25)).num_walls == 25 for seed in range(20))
    crowded = generate(1, 3, 3, (100, 100))  # capped: two cells stay free for the agent and the goal
    assert crowded.num_walls == 7


def test_generated_levels_include_unreachable_goals_as_dcds_do():
    lengths = [shortest_path_length(generate(seed, 13, 13, (50, 50))) for seed in range(100)]
    assert None in lengths and any(n is not None for n in lengths)


@pytest.mark.parametrize("seed", [-1, MAX_SEED, 1.5, True])
def test_generate_rejects_a_seed_outside_the_seed_range(seed):
    with pytest.raises(ValueError, match="seed must be an int in \\[0, 2147483647\\)"):
        generate(seed, 13, 13, (25, 25))


def test_generate_rejects_bad_sizes_and_blocks():
    with pytest.raises(ValueError, match="maze width must be an int in \\[3, 63\\]"):
        generate(0, 64, 13, (25, 25))
    with pytest.raises(ValueError, match="blocks must be an inclusive \\(low, high\\) pair"):
        generate(0, 13, 13, (30, 20))


@pytest.mark.parametrize(
    "spec, expected",
    [("25", (25, 25)), ("0-60", (0, 60)), (" 5 - 7 ", (5, 7)), (25, (25, 25)), (np.int64(3), (3, 3)),
     ("4-4", (4, 4))],
)
def test_parse_blocks_accepts_a_number_or_a_range(spec, expected):
    assert parse_blocks(spec) == expected


@pytest.mark.parametrize("spec", ["", "a", "-5", "5-", "1-2-3", "1.5", -1, True, None, "60-0"])
def test_parse_blocks_rejects_anything_else_naming_the_flag(spec):
    with pytest.raises(ValueError, match="--maze-blocks"):
        parse_blocks(spec)


def test_parse_blocks_error_gives_the_expected_form():
    with pytest.raises(ValueError, match="a number such as 25 or a range such as 0-60, got 'x'"):
        parse_blocks("x")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("A...G\n.....\n.....\n", 4),  # a straight line
        ("A#G\n.#.\n...\n", 6),  # a detour around a wall
        ("A#.\n##.\n..G\n", None),  # walled in
        ("A.#\n.#.\n#.G\n", None),  # a diagonal blocks 4-neighbour moves
        ("...\n.A.\n..G\n", 2),
        ("A.........\n#########.\nG.........\n", 20),  # a U-turn round the end of a wall
    ],
)
def test_shortest_path_length_on_hand_built_grids(text, expected):
    assert shortest_path_length(MazeLevel.from_text(text)) == expected


def test_every_suite_maze_loads_at_the_family_size_and_is_solvable_and_hard_ish():
    names = suite_names()
    assert len(names) >= 8 and names == sorted(names) and len(set(names)) == len(names)
    assert {"labyrinth", "spiral", "rooms_doors", "long_corridor", "perfect_maze", "four_rooms", "zigzag",
            "open_room"} <= set(names)
    for name in names:
        level = suite_level(name)
        assert (level.width, level.height) == (13, 13), name
        length = shortest_path_length(level)
        assert length is not None and length >= 24, (name, length)


def test_suite_files_state_their_shortest_path():
    for name in suite_names():
        text = (resources.files("levelray.families.maze") / "suite" / f"{name}.txt").read_text()
        assert f"; Shortest path: {shortest_path_length(suite_level(name))} moves." in text, name


def test_suite_ids_are_distinct_and_above_every_seed():
    ids = [suite_level_id(name) for name in suite_names()]
    assert ids == list(range(SUITE_ID_BASE, SUITE_ID_BASE + len(ids)))
    assert min(ids) >= LEVEL_ID_BASE > MAX_SEED and max(ids) < EDITED_ID_BASE
    assert ids[-1] < np.iinfo(np.int64).max and EDITED_ID_BASE - SUITE_ID_BASE == 1 << 32
    assert [suite_name_for_id(i) for i in ids] == suite_names()


def test_an_unknown_suite_name_lists_the_known_ones():
    with pytest.raises(KeyError, match="unknown suite maze 'nope': known mazes are comb, .*spiral"):
        suite_level("nope")
    with pytest.raises(KeyError, match="nope"):
        suite_level_id("nope")


def test_level_for_id_routes_seeds_suite_ids_and_rejects_the_rest():
    assert level_for_id(7, 13, 13, (25, 25)) == generate(7, 13, 13, (25, 25))
    assert level_for_id(np.int64(MAX_SEED - 1), 9, 9, (0, 10)) == generate(MAX_SEED - 1, 9, 9, (0, 10))
    for name in suite_names():
        assert level_for_id(suite_level_id(name), 13, 13, (25, 25)) == suite_level(name)
    with pytest.raises(ValueError, match="suite maze 'comb' .* is 13x13, the maze family is 15x15"):
        level_for_id(suite_level_id("comb"), 15, 15, (25, 25))
    for bad in (-1, MAX_SEED, SUITE_ID_BASE - 1, SUITE_ID_BASE + len(suite_names()), EDITED_ID_BASE):
        with pytest.raises(ValueError, match=f"unknown level id {bad}: seeds are in \\[0, 2147483647\\)"):
            level_for_id(bad, 13, 13, (25, 25))


def _recursive_backtracker(seed: int, cells: int) -> np.ndarray:
    """A perfect maze on `cells x cells` rooms at even coordinates: `[2*cells-1, 2*cells-1]` bool walls."""
    rng = np.random.default_rng(seed)
    walls = np.ones((2 * cells - 1, 2 * cells - 1), dtype=bool)
    walls[0, 0] = False
    seen, stack = {(0, 0)}, [(0, 0)]
    while stack:
        cx, cy = stack[-1]
        options = [(cx + dx, cy + dy) for dx, dy in ((1, 0), (0, 1), (-1, 0), (0, -1))
                   if 0 <= cx + dx < cells and 0 <= cy + dy < cells and (cx + dx, cy + dy) not in seen]
        if not options:
            stack.pop()
            continue
        nx, ny = options[int(rng.integers(len(options)))]
        walls[2 * ny, 2 * nx] = walls[cy + ny, cx + nx] = False
        seen.add((nx, ny))
        stack.append((nx, ny))
    return walls


def _distances(walls: np.ndarray, start: tuple[int, int]) -> dict[tuple[int, int], int]:
    dist, queue = {start: 0}, deque([start])
    while queue:
        x, y = queue.popleft()
        for n in ((x + 1, y), (x - 1, y), (x, y + 1), (x, y - 1)):
            if 0 <= n[0] < walls.shape[1] and 0 <= n[1] < walls.shape[0] and not walls[n[1], n[0]] and n not in dist:
                dist[n] = dist[(x, y)] + 1
                queue.append(n)
    return dist


def test_the_perfect_maze_file_is_the_generators_output_for_its_seed():
    level = suite_level("perfect_maze")
    walls = _recursive_backtracker(seed=4, cells=7)
    assert np.array_equal(level.walls, walls)
    dist = _distances(walls, (0, 0))
    assert len(dist) == (~walls).sum() == 7 * 7 + 7 * 7 - 1  # every room reached, a tree: rooms + passages
    assert (level.agent, level.agent_dir) == ((0, 0), 0)
    assert dist[level.goal] == max(dist.values()) == shortest_path_length(level)


def test_render_rgb_draws_walls_floor_agent_and_goal():
    level = MazeLevel.from_text("#.G\n...\nv..\n")
    image = render_rgb(level, tile=4)
    assert image.shape == (12, 12, 3) and image.dtype == np.uint8
    assert image[1, 1].tolist() == [128, 128, 128]  # wall at (0, 0)
    assert image[1, 5].tolist() == [0, 0, 0]  # floor at (1, 0)
    assert image[1, 9].tolist() == [40, 200, 40]  # goal at (2, 0)
    assert image[9, 1].tolist() == [220, 40, 40]  # agent at (0, 2), facing down: its bottom edge is marked
    assert image[11, 1].tolist() == [255, 220, 0] and image[8, 1].tolist() == [220, 40, 40]
    assert render_rgb(suite_level("spiral")).shape == (104, 104, 3)
    with pytest.raises(ValueError, match="tile must be a positive int"):
        render_rgb(level, tile=0)

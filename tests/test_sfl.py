"""SFL, Sampling For Learnability (`--level-source sfl`, `level_service.sfl`): learnability against a hand-worked case,
the buffer as exactly the top-k of a known batch, the training mix within its binomial bound, a batch that loses one
actor's plays and refreshes from the others', its state saved and resumed, its statistics flowing as the family's
do, a short run on the corridor family on both backends, and the refusals (a family without a success signal, a run
without Robust PLR's flag or with level windows)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from levelray.contracts.config import ConfigError, EnvConfig, LevelConfig, SflConfig
from levelray.contracts.levels import EpisodeResults
from levelray.contracts.status import published
from levelray.deploy.cli import main
from levelray.deploy.monitoring.metrics import JobCollector
from levelray.level_service.buffer import LevelBuffer
from levelray.level_service.service import LevelServiceCore
from levelray.level_service.sfl import SFL, learnability
from levelray.level_service.spaces import make_sampler, sampler_from_state

CORRIDOR = EnvConfig(id="corridor:walk", family="tests.corridor:FAMILY", num_levels=0)


def sfl_levels(**sfl) -> LevelConfig:
    return LevelConfig(source="sfl", robust=True, window=0, sfl=SflConfig(**sfl))


def results(levels, solved, replayed, lengths=None) -> EpisodeResults:
    """`EpisodeResults` of episodes on `levels [E]` (scores and returns 0: SFL reads neither)."""
    n = len(levels)
    return EpisodeResults(np.asarray(levels, dtype=np.int64), np.zeros(n), np.ones(n, dtype=np.int64) if lengths is None
                          else np.asarray(lengths, dtype=np.int64), np.zeros(n), np.asarray(solved, dtype=bool),
                          np.asarray(replayed, dtype=bool))


def play_batch(source: SFL, solved_of) -> np.ndarray:
    """Hand out the whole batch and report every play, candidate `i`'s j-th solved where `solved_of(i, j)`; returns
    the candidates `[C]` in their order."""
    candidates = source._candidates.copy()
    c, episodes = candidates.size, source.config.sfl.episodes
    ids, flags = source.draw_many(c * episodes)
    assert not flags.any()  # candidate plays are never trained on
    index = {int(level): i for i, level in enumerate(candidates.tolist())}
    seen = np.zeros(c, dtype=np.int64)
    solved = []
    for level in ids.tolist():
        i = index[level]
        solved.append(solved_of(i, int(seen[i])))
        seen[i] += 1
    assert (seen == episodes).all()  # each candidate handed out `episodes` times
    source.update_with_episodes(results(ids, solved, np.zeros(ids.size, dtype=bool)))
    return candidates


def test_learnability_of_a_hand_worked_batch():
    # 0 to 4 solved of 4 plays: p = 0, 1/4, 1/2, 3/4, 1 and p(1 - p) = 0, 3/16, 1/4, 3/16, 0
    score, p = learnability(np.array([0, 1, 2, 3, 4]), np.array([4, 4, 4, 4, 4]))
    assert p.tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert score.tolist() == [0.0, 0.1875, 0.25, 0.1875, 0.0]
    source = SFL(None, sfl_levels(num_candidates=5, episodes=4, buffer_size=5), rng=3)
    candidates = play_batch(source, lambda i, j: j < i)  # candidate i solves its first i plays
    view = source.view()
    # the buffer, highest learnability first, ties (1/4 and 3/4, 0 and 1) in candidate order
    assert view.seeds.tolist() == candidates[[2, 1, 3, 0, 4]].tolist()
    assert view.scores.tolist() == [0.25, 0.1875, 0.1875, 0.0, 0.0]
    stats = source.level_statistics.summary(view.seeds)
    assert stats == {"levels_mean_learnability": pytest.approx(0.625 / 5), "levels_mean_success_rate": 0.5}


def test_the_buffer_keeps_exactly_the_top_k_of_a_known_batch():
    source = SFL(None, sfl_levels(num_candidates=40, episodes=6, buffer_size=7), rng=11)
    rates = np.random.default_rng(5).integers(0, 7, size=40)  # candidate i solves rates[i] of its 6 plays
    candidates = play_batch(source, lambda i, j: j < rates[i])
    score = (rates / 6) * (1 - rates / 6)
    expected = candidates[np.argsort(-score, kind="stable")[:7]]
    assert source.view().seeds.tolist() == expected.tolist()
    assert sorted(source.view().scores.tolist(), reverse=True) == sorted(score, reverse=True)[:7]
    assert source.counters()["num_batches"] == 1 and source.replay_probability() == 1.0
    # a fixed set of 5 levels: a batch is at most the set, and the buffer at most the batch
    small = SFL(np.arange(100, 105), sfl_levels(num_candidates=40, episodes=2, buffer_size=7), rng=0)
    assert sorted(play_batch(small, lambda i, j: j == 0).tolist()) == list(range(100, 105))
    assert sorted(small.view().seeds.tolist()) == list(range(100, 105))


def test_the_training_mix_matches_its_ratio_within_sampling_error():
    for fraction in (0.5, 0.2):
        source = SFL(None, sfl_levels(num_candidates=30, episodes=2, buffer_size=10, buffer_fraction=fraction),
                     rng=7)
        play_batch(source, lambda i, j: j == 0)
        buffer = set(source.view().seeds.tolist())
        n = 20_000
        ids, flags = source.draw_many(n)
        singles = [source.draw() for _ in range(2000)]  # the inline backend's one level at a time
        assert flags.all() and all(trained for _, trained in singles)  # every training level is trained on
        for drawn in (ids.tolist(), [level for level, _ in singles]):
            share = np.isin(drawn, list(buffer)).mean()
            # a fresh level lands in the buffer with probability 10 / 2^31: the share is Binomial(m, fraction) / m
            bound = 4 * np.sqrt(fraction * (1 - fraction) / len(drawn))
            assert abs(share - fraction) < bound, (fraction, share, bound)
        counts = np.unique(ids[np.isin(ids, list(buffer))], return_counts=True)[1]
        assert counts.size == 10 and counts.min() > 0.7 * counts.mean()  # uniform over the buffer


class Clock:
    """Seconds that pass only when a test says so (`SFL`'s `clock`)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_an_actor_killed_mid_batch_loses_only_its_own_plays():
    """Three actors draw a batch of 12 candidates x 3 plays, 12 plays each; the third dies before reporting any.
    The batch waits in its tail (training draws) until it has been idle on both clocks: the env steps reported since
    its last play was handed out reach those its reported plays took, and `play_timeout_s` seconds passed without a
    play. It then refreshes from what came back: every candidate from its 2 plays of 3."""
    clock = Clock()
    source = SFL(None, sfl_levels(num_candidates=12, episodes=3, buffer_size=12, play_timeout_s=30.0), rng=1,
                 clock=clock)
    handed = [source.draw_many(12) for _ in range(3)]  # play j goes to candidate j mod 12: each actor has one of each
    assert all(not flags.any() for _, flags in handed)
    rng = np.random.default_rng(2)
    solved = [rng.random(12) < 0.5 for _ in range(2)]
    for (ids, _), won in zip(handed[:2], solved, strict=True):  # actors 0 and 1 report, 5 steps a play
        source.update_with_episodes(results(ids, won, np.zeros(12, dtype=bool), np.full(12, 5)))
    assert source._phase == "evaluate" and source.view().seeds.size == 0  # waiting for actor 2's plays
    tail, trained = source.draw_many(8)
    assert trained.all()  # nothing left to hand out: the tail trains on the training mix (fresh levels, no buffer)
    source.update_with_episodes(results(tail[:4], np.ones(4, dtype=bool), np.ones(4, dtype=bool), np.full(4, 20)))
    assert source._phase == "evaluate"  # 80 steps reported in the tail, of the 120 the batch's plays took
    clock.now = 29.0
    source.update_with_episodes(results(tail[4:], np.ones(4, dtype=bool), np.ones(4, dtype=bool), np.full(4, 10)))
    assert source._phase == "evaluate"  # 120 steps, but 29 s since the last play came back
    clock.now = 30.0
    source.update_with_episodes(results(tail[:1], [True], [True], [1]))
    assert source._phase == "train"  # idle on both clocks: actor 2's plays are lost; the batch refreshed without them
    order = {int(level): i for i, level in enumerate(handed[0][0].tolist())}
    p = np.zeros(12)
    for (ids, _), won in zip(handed[:2], solved, strict=True):
        for level, w in zip(ids.tolist(), won.tolist(), strict=True):
            p[order[level]] += w / 2
    view = source.view()
    assert view.seeds.size == 12
    assert np.allclose(view.scores, [p[order[s]] * (1 - p[order[s]]) for s in view.seeds.tolist()])
    counts = source.counters()
    assert counts["num_plays_reported"] == 24 and counts["num_lost_plays"] == 12
    source.update_with_episodes(results(handed[2][0][:3], np.ones(3, dtype=bool), np.zeros(3, dtype=bool)))
    assert source.counters()["num_late_plays"] == 3 and np.allclose(source.view().scores, view.scores)
    # a candidate none of whose plays came back is left out of the buffer
    alone = SFL(None, sfl_levels(num_candidates=4, episodes=1, buffer_size=4, play_timeout_s=0.0), rng=0)
    ids, _ = alone.draw_many(4)
    alone.update_with_episodes(results(ids[:3], [True, False, True], np.zeros(3, dtype=bool), [2, 2, 2]))
    alone.update_with_episodes(results(alone.draw_many(1)[0], [True], [True], [6]))
    assert sorted(alone.view().seeds.tolist()) == sorted(ids[:3].tolist())


def test_plays_queued_behind_training_levels_are_waited_for():
    """On Ray an actor plays the levels it prefetched before the batch began ahead of the batch's plays, while its
    other envs report training episodes: many env steps come back before the first play does. None is given up
    until no play has moved for `play_timeout_s` seconds; when they come, the batch closes with all of them."""
    clock = Clock()
    source = SFL(None, sfl_levels(num_candidates=8, episodes=2, buffer_size=4, play_timeout_s=10.0), rng=3,
                 clock=clock)
    plays, flags = source.draw_many(16)
    assert not flags.any()
    for second in range(1, 10):  # a queue of training levels drains: 16 x 50 env steps a second, no play back
        clock.now = float(second)
        queued, _ = source.draw_many(16)
        source.update_with_episodes(results(queued, np.ones(16, dtype=bool), np.ones(16, dtype=bool), np.full(16, 50)))
        assert source._phase == "evaluate" and source.view().seeds.size == 0
    clock.now = 9.5
    source.update_with_episodes(results(plays, np.arange(16) % 3 == 0, np.zeros(16, dtype=bool), np.full(16, 5)))
    assert source._phase == "train" and source.view().seeds.size == 4
    assert source.counters()["num_lost_plays"] == 0 and source.counters()["num_plays_reported"] == 16


def test_after_refresh_steps_of_training_the_next_batch_begins():
    source = SFL(None, sfl_levels(num_candidates=4, episodes=2, buffer_size=2, refresh_steps=100), rng=4)
    first = play_batch(source, lambda i, j: j == 0)
    ids, flags = source.draw_many(9)
    assert flags.all()
    source.update_with_episodes(results(ids, np.ones(9, dtype=bool), flags, np.full(9, 11)))  # 99 steps
    assert source._phase == "train"
    source.update_with_episodes(results(ids[:1], [False], [False], [50]))  # not trained on: no step of the period
    assert source._phase == "train"
    source.update_with_episodes(results(ids[:1], [True], [True], [1]))  # 100
    assert source._phase == "evaluate" and source.replay_probability() == 0.0
    assert set(source._candidates.tolist()).isdisjoint(first.tolist())  # a new random batch
    assert source.view().seeds.size == 2  # the last buffer serves the tail until the new batch closes


def test_state_round_trip_and_resume(tmp_path):
    source = make_sampler(None, sfl_levels(num_candidates=10, episodes=3, buffer_size=4), start_level=50, rng=9)
    play_batch(source, lambda i, j: (i + j) % 3 == 0)
    ids, _ = source.draw_many(15)
    source.update_with_episodes(results(ids[:5], np.ones(5, dtype=bool), np.ones(5, dtype=bool), np.full(5, 7)))
    state = source.state_dict()
    back = sampler_from_state(state)
    assert isinstance(back, SFL) and back.config == source.config
    for key, value in back.state_dict().items():
        assert np.array_equal(value, state[key]) if isinstance(value, np.ndarray) else value == state[key], key
    assert np.array_equal(back.draw_many(30)[0], source.draw_many(30)[0])  # the same draws go on
    # a state saved mid-batch: its plays out went with the old actors, so no idle seconds are waited for
    mid = SFL(None, sfl_levels(num_candidates=4, episodes=2, buffer_size=2, play_timeout_s=1e9), rng=5)
    plays, _ = mid.draw_many(8)
    mid.update_with_episodes(results(plays[:4], [True, False, True, False], np.zeros(4, dtype=bool), np.full(4, 3)))
    resumed_mid = SFL.from_state_dict(mid.state_dict())
    tail, _ = resumed_mid.draw_many(2)
    resumed_mid.update_with_episodes(results(tail, [True, True], [True, True], [6, 6]))  # 12 steps >= the plays' 12
    assert resumed_mid._phase == "train" and resumed_mid.counters()["num_lost_plays"] == 4
    # resumed through the level service's snapshot, for the same level space only
    path = tmp_path / "levels.msgpack"
    service = LevelServiceCore(None, sfl_levels(num_candidates=10, episodes=3), start_level=50, rng=1,
                               snapshot_path=str(path))
    service.report_episodes(results(service.sample_levels(4)[0], [True] * 4, [False] * 4))
    service.snapshot()
    resumed = LevelServiceCore(None, sfl_levels(num_candidates=10, episodes=3), start_level=50, rng=2,
                               snapshot_path=str(path))
    assert resumed.stats()["restored_from_snapshot"]
    assert resumed.state_dict()["plays"].sum() == 4
    with pytest.raises(ValueError, match="not written for a fixed set of 10 levels"):
        LevelServiceCore(np.arange(10), sfl_levels(), rng=0, snapshot_path=str(path))
    with pytest.raises(ValueError, match=r"state\['solved'\]"):
        sampler_from_state({**state, "solved": state["plays"] + 1})
    # a PLR state now saves the `levels.sfl` section too, and reads it back as one
    plr = LevelBuffer(0, LevelConfig(sfl=SflConfig(episodes=5)), rng=0)
    assert sampler_from_state(plr.state_dict()).config.sfl == SflConfig(episodes=5)


def test_bad_results_are_refused_naming_the_field_and_nothing_changes():
    source = SFL(np.arange(10, 20), sfl_levels(num_candidates=4, episodes=2), rng=0)
    ids, _ = source.draw_many(2)
    before = source.state_dict()
    for bad, words in (
        (EpisodeResults(ids, np.zeros(2), np.ones(2, dtype=np.int64), np.zeros(2), np.ones(2, dtype=bool)),
         "replayed must be a boolean array"),
        (results([10, 99], [True, True], [False, False]), "levels holds level id 99, not a level of a fixed set"),
        (EpisodeResults(ids, np.zeros(2), np.ones(2, dtype=np.int64), np.zeros(2), np.ones(2, dtype=bool),
                        np.array([0, 1])), "replayed must be a boolean array of shape"),
    ):
        with pytest.raises(ValueError, match=words):
            source.update_with_episodes(bad)
    after = source.state_dict()
    assert all(np.array_equal(after[k], v) if isinstance(v, np.ndarray) else after[k] == v for k, v in before.items())


def test_its_statistics_flow_as_the_familys_to_records_status_and_prometheus():
    service = LevelServiceCore(None, sfl_levels(num_candidates=6, episodes=2, buffer_size=3), rng=0, env=CORRIDOR)
    assert service.stats()["levels_mean_learnability"] is None  # no buffer before the first batch closes
    ids, _ = service.sample_levels(12)
    service.report_episodes(results(ids, [True, False] * 3 + [True] * 6, [False] * 12))
    stats = service.stats()
    assert stats["levels_buffered"] == 3 and stats["level_statistics"]["levels_mean_length"] is not None
    assert stats["levels_mean_learnability"] == pytest.approx(0.25)  # three candidates solved once of twice
    assert stats["level_statistics"]["levels_mean_success_rate"] == pytest.approx(0.5)
    record = {"levels_buffered": 3, **stats["level_statistics"]}
    assert published(record)["levels_mean_learnability"] == pytest.approx(0.25)
    collector = JobCollector()
    collector.update({"levels": stats})
    gauges = {family.name: family for family in collector.collect()}
    assert gauges["levelray_levels_mean_learnability"].samples[0].value == pytest.approx(0.25)
    assert "success rate" in gauges["levelray_levels_mean_success_rate"].documentation


SFL_RUN = ["--env", "corridor:walk", "--env-family", "tests.corridor:FAMILY", "--num-levels", "0", "--level-source",
           "sfl", "--level-robust", "--level-window", "0", "--sfl-candidates", "16", "--sfl-episodes", "4",
           "--sfl-buffer-size", "4", "--sfl-refresh-steps", "2000", "--num-actors", "1", "--envs-per-actor", "16",
           "--metrics-port", "0", "--report-interval", "1", "--quiet", "--tensorboard", "false"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["inline", "ray"])
def test_a_short_sfl_run_on_both_backends(backend, tmp_path, request, one_thread):
    if backend == "ray":
        request.getfixturevalue("ray_session")
    run = tmp_path / "sfl"
    # On Ray the actors report finished episodes every half second, so a budget spent in a few seconds under load
    # could end the run before the last candidate plays reach the level service: a budget with room for several
    # reports, whatever the load
    steps = "20000" if backend == "inline" else "60000"
    assert main(["train", "--backend", backend, *SFL_RUN, "--total-steps", steps, "--run-dir", str(run)]) == 0
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    last = records[-1]
    assert last["levels_buffered"] == 4 and last["levels_mean_success_rate"] is not None
    assert 0.0 <= last["levels_mean_learnability"] <= 0.25 and last["levels_mean_length"] is not None
    assert last["samples_trained"] > 0  # the training mix was trained on, the candidates' plays not
    fractions = [r["levels_trained_fraction"] for r in records if r["levels_trained_fraction"] is not None]
    assert fractions and all(0.0 <= f <= 1.0 for f in fractions), records
    # the candidates' plays carry no gradient; what carries it is trained on (or waits in a batch being gathered)
    assert last["samples_trained"] <= last["learner_samples_with_gradient"] < last["env_steps"]
    assert {"levels_mean_learnability", "levels_mean_success_rate"} <= set(published(last))  # to `levelray status`
    if backend == "inline":  # the report names the run's levels by their source, not the unused PLR strategy
        from levelray.deploy.report.command import make_report

        gallery = make_report([run], tmp_path / "report")["level_gallery"]
        assert [g["label"] for g in gallery["galleries"]] == ["sfl (sfl, level buffer)"]


def test_refused_naming_the_flag_where_the_run_cannot_run_sfl(tmp_path, capsys):
    base = ["train", "--backend", "inline", "--num-levels", "0", "--level-source", "sfl", "--metrics-port", "0",
            "--quiet"]
    for extra, words in (
        (["--env", "CartPole-v1", "--level-robust", "--level-window", "0"],
         "--level-source sfl (levels.source) learns from success rates, but env CartPole-v1 does not say"),
        (["--env", "maze:9x9", "--level-window", "0"], "needs --level-robust (levels.robust"),
        (["--env", "maze:9x9", "--level-robust"], "set --level-window 0 (levels.window is 256"),
    ):
        run = tmp_path / str(len(extra))
        with pytest.raises(SystemExit) as refused:
            main([*base, *extra, "--run-dir", str(run)])
        assert refused.value.code == 2
        assert words in capsys.readouterr().err
        assert not run.exists()  # refused before the run directory was claimed
    with pytest.raises(ConfigError, match="levels.editor must be none"):
        SFL.check_run(LevelConfig(source="sfl", robust=True, editor="accel"), None)
    with pytest.raises(ValueError, match="levels.sfl.buffer_fraction: must be <= 1.0"):
        SFL(None, LevelConfig(source="sfl", sfl=SflConfig(buffer_fraction=1.5)))

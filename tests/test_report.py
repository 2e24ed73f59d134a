"""`levelray report`: every figure from real short runs (PLR, uniform, a CartPole run with replay)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from levelray.contracts.config import ConfigError
from levelray.deploy.cli import main
from levelray.deploy.report.command import make_report
from levelray.deploy.report.runs import level_matrix, load_run, read_records

TINY = ["--backend", "inline", "--num-actors", "1", "--envs-per-actor", "2", "--unroll-length", "8",
        "--metrics-port", "0", "--report-interval", "0", "--quiet"]
# 512 steps: a few BigFish episodes end (so there are returns and seen levels); a checkpoint every 8
# updates gives the level heat maps 4 rows; held-out evaluations every 16 updates where the runner has them
BIGFISH = [*TINY, "--env", "procgen:bigfish", "--num-levels", "200", "--batch-size", "1", "--total-steps", "512",
           "--checkpoint-interval", "8", "--keep-checkpoints", "100", "--eval-interval", "16", "--eval-episodes", "2",
           "--eval-envs", "2"]
# a level buffer (--num-levels 0, value_l1) of 8 levels: CartPole's ~20-step episodes fill it and evict from it
# within 640 steps, and replays start once 2 levels are buffered (rho 0.2); checkpoints give the gallery points
# replay decided per episode (--level-window 0): 640 steps of 2 envs fill and turn over the 8-level buffer
BUFFER = [*TINY, "--env", "CartPole-v1", "--num-levels", "0", "--level-strategy", "value_l1", "--batch-size", "2",
          "--level-buffer-size", "8", "--total-steps", "640", "--checkpoint-interval", "8", "--keep-checkpoints", "100",
          "--level-window", "0"]
FIGURES = ("returns", "throughput", "policy_lag", "losses", "level_weights", "level_staleness", "replay_priorities")
PLR, UNI, CP = "plr (value_l1)", "uni (random)", "cp"  # CartPole's levels are reset seeds: not named (runs.has_levels)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny batches; spinning threads crawl on a loaded machine
    try:
        root = tmp_path_factory.mktemp("report")
        assert main(["train", *BIGFISH, "--run-dir", str(root / "plr")]) == 0
        assert main(["train", *BIGFISH, "--level-strategy", "random", "--run-dir", str(root / "uni")]) == 0
        # domain randomisation (no level service): a CartPole run without levels
        assert main(["train", *TINY, "--env", "CartPole-v1", "--num-levels", "0", "--level-strategy", "random",
                     "--batch-size", "2", "--replay-ratio", "0.5", "--replay-min-size", "2", "--total-steps", "320",
                     "--run-dir", str(root / "cp")]) == 0
        assert main(["train", *BUFFER, "--run-dir", str(root / "buf")]) == 0
    finally:
        torch.set_num_threads(before)
    return root


def _is_png(path) -> bool:
    with open(path, "rb") as f:
        return f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_report_from_real_runs(runs, tmp_path):
    out = tmp_path / "report"
    figs = make_report([runs / "plr", runs / "uni", runs / "cp"], out)
    for name in FIGURES:
        assert figs[name]["path"] == str(out / f"{name}.png"), (name, figs[name])
        assert _is_png(figs[name]["path"])
    series = {name: figs[name]["series"] for name in figs}
    assert {f"{PLR} train", f"{UNI} train", f"{CP} train"} <= set(series["returns"])
    for label, run in ((PLR, "plr"), (UNI, "uni")):
        records = load_run(runs / run)["records"]
        assert any(r.get("test_return_mean") is not None for r in records)  # held-out evaluations were logged
        assert f"{label} test" in series["returns"]
    assert series["throughput"] == series["policy_lag"] == [PLR, UNI, CP]
    assert series["losses"] == [f"{label} {kind}" for kind in ("loss_total", "loss_policy", "loss_value", "entropy")
                                for label in (PLR, UNI, CP)]
    # the heat maps show the PLR run (not the uniform one), one row per report or kept checkpoint
    for name in ("level_weights", "level_staleness"):
        assert series[name] == [PLR]
        rows, levels = figs[name]["shape"]
        assert levels == 200 and rows >= 4
    assert series["replay_priorities"] == [CP]  # the only run with replay
    # the level gallery draws the PLR run's procgen levels (512x512 first frames), not the uniform run's
    assert series["level_gallery"] == [PLR] and all(_is_png(p) for p in figs["level_gallery"]["paths"])
    assert [g["label"] for g in figs["level_gallery"]["galleries"]] == [PLR]
    assert figs["model_loss"]["path"] is None and "--model-loss muzero" in figs["model_loss"]["skipped"]
    summary = (out / "summary.md").read_text()
    assert figs["summary"]["series"] == [PLR, UNI, CP]
    for label in (PLR, UNI, CP):
        assert f"| {label} |" in summary
    assert "procgen:bigfish (easy)" in summary and "CartPole-v1" in summary

    # the data behind the heat maps: PLR's replay distribution once levels are seen, uniform for random
    _, seeds, weights, _ = level_matrix(load_run(runs / "plr"), "weights")
    assert seeds.tolist() == list(range(200))
    # records keep 6 decimals of each weight, so the sum is 1 to within 200 * 5e-7
    assert weights[-1].sum() == pytest.approx(1.0, abs=1e-4) and (weights[-1] > 0).sum() < 200
    _, _, stale, _ = level_matrix(load_run(runs / "plr"), "staleness")
    assert (stale >= 0).all() and stale[-1].max() > 0
    _, _, uniform, _ = level_matrix(load_run(runs / "uni"), "weights")
    assert np.allclose(uniform, 1 / 200)


def test_report_cli(runs, tmp_path, capsys):
    assert main(["report", str(runs / "cp"), "--out", str(tmp_path / "r")]) == 0
    text = capsys.readouterr().out
    assert f"report in {tmp_path / 'r'}" in text and "returns.png" in text
    # CartPole with --num-levels 0 has no level set: the level heat maps are skipped, with the reason
    assert "level_weights      skipped: no run has level_weights" in text
    assert "skipped" in (tmp_path / "r" / "summary.md").read_text()
    with pytest.raises(SystemExit) as exc:
        main(["report", str(tmp_path / "nothing-here")])
    assert exc.value.code == 2 and "RUN_DIR" in capsys.readouterr().err


def test_report_reads_optional_record_keys(tmp_path):
    """`test_return_mean`, `level_weights`, `level_staleness` and `replay_priority_hist` in metrics.jsonl."""
    run = tmp_path / "synthetic"
    run.mkdir()
    (run / "config.yaml").write_text("env: {id: 'procgen:coinrun', num_levels: 3, start_level: 10}\n"
                                     "levels: {strategy: value_l1}\n")
    records = []
    for i in range(5):
        records.append({
            "time": i, "env_steps": 100 * i, "env_steps_per_second": 50.0, "episode_return_mean": float(i),
            "learner_version": i, "policy_lag_mean": 1.0, "learner_loss_total": 1.0 / (i + 1),
            **({"learner_model_loss": 2.0 / (i + 1), "learner_model_value_loss": 1.0 / (i + 1),
                "learner_model_reward_loss": 0.5} if i >= 2 else {}),  # the model loss starts late (replay)
            "level_weights": [0.2, 0.3, 0.5], "level_staleness": [i, 0, 2 * i],
            "replay_priority_hist": {"edges": [0.0, 0.5, 1.0], "counts": [3, i + 1]},
            **({"test_return_mean": i / 2, "test_version": i, "test_env_steps": 100 * i - 50} if i % 2 == 0 else {}),
        })
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n{\"torn")
    figs = make_report([run], tmp_path / "out")
    label = "synthetic (value_l1)"
    assert figs["returns"]["series"] == [f"{label} train", f"{label} test"]
    assert figs["level_weights"]["source"] == figs["level_staleness"]["source"] == "metrics.jsonl"
    assert figs["level_weights"]["shape"] == [5, 3]
    assert figs["replay_priorities"]["series"] == [label] and figs["replay_priorities"]["source"] == {
        label: "metrics.jsonl"}
    assert figs["losses"]["series"] == [f"{label} loss_total"]
    # one panel per term the run reported, the total first; none for terms it did not have
    assert figs["model_loss"]["series"] == [f"{label} model_{k}" for k in ("loss", "value_loss", "reward_loss")]
    assert _is_png(figs["model_loss"]["path"])
    steps, seeds, stale, source = level_matrix(load_run(run), "staleness")
    assert seeds.tolist() == [10, 11, 12] and stale[:, 2].tolist() == [0, 2, 4, 6, 8]
    assert "| 2.00 |" in (tmp_path / "out" / "summary.md").read_text()  # the last test return (i = 4)


def test_read_records_skips_a_torn_last_line_and_refuses_a_damaged_file(tmp_path):
    """`read_records` of a run directory or its metrics.jsonl: blank lines and a torn last line (a run being
    written, or killed mid-write) are skipped; a bad line before the last, or no file, is a ConfigError (no file is
    [] with `missing_ok`: a run that has not reported yet)."""
    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(ConfigError, match="has no metrics.jsonl"):
        read_records(run)
    assert read_records(run, missing_ok=True) == []
    records = [{"env_steps": 10 * i, "time": float(i)} for i in range(3)]
    lines = [json.dumps(r) for r in records]
    (run / "metrics.jsonl").write_text("\n".join([lines[0], "", *lines[1:]]) + '\n{"env_steps": 3')
    assert read_records(run) == read_records(run / "metrics.jsonl") == records
    assert load_run(run)["records"] == records
    (run / "metrics.jsonl").write_text("\n".join([lines[0], '{"env_st', *lines[1:]]) + "\n")
    with pytest.raises(ConfigError, match="line 2 is not JSON"):
        read_records(run)


def test_returns_are_drawn_against_trained_steps_too(tmp_path):
    """returns_trained.png takes a train point's x from `samples_trained` and a held-out one's from
    `test_samples_trained`; records without them (older runs) are left out rather than drawn at env steps."""
    from levelray.deploy.report.figures import returns_figure
    from levelray.deploy.report.runs import record_series

    records = [{"env_steps": 100 * i, "samples_trained": 40 * i, "episode_return_mean": float(i)} for i in range(4)]
    records += [{"env_steps": 350, "test_return_mean": 2.0, "test_env_steps": 300, "test_samples_trained": 120},
                {"env_steps": 400, "episode_return_mean": 9.0}]  # no samples_trained: not on the trained axis
    x, y = record_series(records, "episode_return_mean", x_key="samples_trained", x_required=True)
    assert x.tolist() == [0, 40, 80, 120] and y.tolist() == [0.0, 1.0, 2.0, 3.0]
    x, _ = record_series(records, "test_return_mean", x_key="test_samples_trained", x_required=True)
    assert x.tolist() == [120]
    run = {"records": records, "label": "r (value_l1)"}
    fig = returns_figure([run], tmp_path / "trained.png", "trained steps")
    assert fig["series"] == ["r (value_l1) train", "r (value_l1) test"] and _is_png(fig["path"])
    old = {"records": [{"env_steps": 10, "episode_return_mean": 1.0}], "label": "old"}
    assert returns_figure([old], tmp_path / "old.png", "trained steps")["path"] is None


def _write_run(path, strategy: str, steps: list[int], returns: list[float], tests: list[tuple[int, float]]) -> None:
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(f"env: {{id: 'minigrid:DoorKey-6x6', num_levels: 200}}\n"
                                      f"levels: {{strategy: {strategy}}}\n")
    records = [{"env_steps": s, "episode_return_mean": r} for s, r in zip(steps, returns, strict=True)]
    records += [{"env_steps": s + 5, "test_return_mean": r, "test_env_steps": s} for s, r in tests]
    records.sort(key=lambda rec: rec["env_steps"])
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_report_groups_runs_into_arms_with_confidence_bands(tmp_path, capsys):
    """Three seeds per arm, reporting at different env steps: each arm's band is the t-interval over runs of
    the curves interpolated onto common steps, and the summary's final values match a float64 reference."""
    rng = np.random.default_rng(0)
    final = {"value_l1": [], "random": []}
    finals_test = {"value_l1": [], "random": []}
    for strategy, slope in (("value_l1", 2.0), ("random", 1.0)):
        for seed in range(3):
            steps = sorted(set(rng.integers(1, 999, size=8).tolist()) | {0, 1000 + 10 * seed})
            returns = [slope * s / 1000 + 0.1 * seed for s in steps]
            tests = [(s, slope * s / 2000 + 0.05 * seed) for s in (0, 500, 1000)]
            _write_run(tmp_path / f"{strategy}-{seed}", strategy, steps, returns, tests)
            final[strategy].append(returns[-1])
            finals_test[strategy].append(tests[-1][1])
    runs = sorted(tmp_path.glob("*-*"))
    out = tmp_path / "out"
    assert main(["report", *map(str, runs), "--out", str(out), "--group-by", "levels.strategy"]) == 0
    assert "return_bands" in capsys.readouterr().out and _is_png(out / "return_bands.png")

    figs = make_report(runs, tmp_path / "again", group_by="levels.strategy")
    groups = figs["return_bands"]["groups"]
    assert set(groups) == {"levels.strategy=value_l1", "levels.strategy=random"}
    t2 = 4.302652729749752  # t_{0.975, 2}
    for strategy in ("value_l1", "random"):
        g = groups[f"levels.strategy={strategy}"]
        assert len(g["runs"]) == 3
        for got, values in ((g["final_train_return"], final[strategy]), (g["final_test_return"],
                                                                          finals_test[strategy])):
            xs = np.asarray(values, dtype=np.float64)
            assert got["n"] == 3 and got["mean"] == pytest.approx(xs.mean(), rel=1e-12)
            assert got["ci95"] == pytest.approx(t2 * xs.std(ddof=1) / np.sqrt(3), rel=1e-9)

    # the curve itself: all runs lie on slope * s / 1000 + 0.1 * seed, so interpolation is exact and the band
    # at any step is the same t-interval of the offsets {0, 0.1, 0.2}
    from levelray.deploy.report.runs import group_curve, group_runs, load_run

    loaded = [load_run(p) for p in runs]
    plr = group_runs(loaded, "levels.strategy")["levels.strategy=value_l1"]
    curve = group_curve(plr, "episode_return_mean")
    assert curve["runs"] == 3 and curve["steps"][0] == 0 and curve["steps"][-1] == 1000  # the range all cover
    np.testing.assert_allclose(curve["mean"], 2.0 * curve["steps"] / 1000 + 0.1, rtol=1e-9)
    np.testing.assert_allclose(curve["half"], t2 * 0.1 / np.sqrt(3), rtol=1e-9)
    summary = (out / "summary.md").read_text()
    assert "## Groups" in summary and "| levels.strategy=value_l1 | 3 |" in summary

    with pytest.raises(SystemExit) as exc:
        main(["report", str(runs[0]), "--group-by", "levels.no_such_key"])
    assert exc.value.code == 2 and "--group-by" in capsys.readouterr().err


BUF = "buf (value_l1, level buffer)"


def _png_size(path) -> tuple[int, int]:
    """(height, width) of a PNG that decodes (matplotlib's reader), after checking its signature and size."""
    from matplotlib.image import imread

    assert _is_png(path) and path.stat().st_size > 0
    return imread(path).shape[:2]


def test_level_buffer_run_from_a_real_run(runs, tmp_path):
    """A real CartPole level-buffer run: its score distribution and replay fraction are drawn beside the fixed-set
    PLR run's, its heat maps are skipped with the reason, and its gallery shows the buffered levels of its
    latest checkpoint, most likely first."""
    from levelray.contracts import snapshot
    from levelray.level_service.buffer import LevelBuffer

    records = load_run(runs / "buf")["records"]
    assert max(r["levels_buffered"] for r in records) == 8 and max(r["levels_evicted"] for r in records) > 0
    assert max(r["levels_replay_fraction"] or 0.0 for r in records) > 0  # the full buffer is replayed from
    out = tmp_path / "report"
    figs = make_report([runs / "plr", runs / "buf", runs / "cp"], out)
    fig = figs["level_buffer"]
    assert fig["path"] == str(out / "level_buffer.png") and _png_size(out / "level_buffer.png") == (500, 1400)
    assert fig["series"] == [f"{PLR} score median", f"{BUF} score median", f"{PLR} levels buffered",
                             f"{BUF} levels buffered", f"{PLR} replay fraction", f"{BUF} replay fraction"]
    assert "level_buffer.png" in (out / "index.html").read_text() and "level_buffer.png" in (
        out / "summary.md").read_text()
    assert figs["level_weights"]["series"] == [PLR]  # the fixed set's heat map; the buffer run has none
    assert level_matrix(load_run(runs / "buf"), "weights") is None
    alone = make_report([runs / "buf", runs / "cp"], tmp_path / "alone")
    for name in ("level_weights", "level_staleness"):
        assert alone[name]["path"] is None
        assert f"level-buffer runs ({BUF})" in alone[name]["skipped"] and "seeds change" in alone[name]["skipped"]

    gallery = next(g for g in figs["level_gallery"]["galleries"] if g["label"] == BUF)
    assert figs["level_gallery"]["series"] == [PLR, BUF] and len(gallery["points"]) >= 2
    latest = sorted((runs / "buf" / "checkpoints").glob("ckpt-*"))[-1]
    point = gallery["points"][0]
    assert point["source"] == f"checkpoint {latest.name}" and _is_png(point["path"])
    state = LevelBuffer.from_state_dict(snapshot.load(latest / "levels.msgpack"))
    p, seeds, scores = state.sample_weights(), state.buffered_seeds(), state.scores()
    assert point["buffered"] and point["num_seen"] == state.size == 8 and point["num_levels"] == 8
    by_p = sorted((-p[i], int(seeds[i]), scores[i]) for i in range(state.size))
    assert [(lv["seed"], lv["p"], lv["score"]) for lv in point["most"]] == [(s, -q, c) for q, s, c in by_p]
    assert point["least"] == []  # all 8 buffered levels are among the 16 most likely


def _write_level_run(path, config: str, records: list[dict]) -> None:
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(config)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def _quantiles(center: float) -> dict:
    return {"min": center - 2, "p25": center - 1, "median": center, "p75": center + 1, "max": center + 2,
            "mean": center}


def test_level_buffer_figure_from_records(tmp_path):
    """The figure from `level_score`, `levels_buffered` and `levels_replay_fraction` records of a buffer run and
    a fixed-set PLR run; skipped, with the reason, for a run without a level service."""
    from levelray.deploy.report.runs import group_runs, score_quantiles

    buf = []
    for i in range(6):  # the buffer fills (2 levels a report, capacity 8) and its slots' seeds change
        buf.append({"env_steps": 100 * i, "episode_return_mean": float(i), "levels_buffered": min(2 * i, 8),
                    "levels_evicted": max(0, 2 * i - 8), "levels_replay_fraction": None if i == 0 else 0.1 * i,
                    "level_score": None if i == 0 else _quantiles(float(i)),
                    "level_weights": [1 / max(min(2 * i, 8), 1)] * min(2 * i, 8)})
    fixed = [{"env_steps": 50 + 100 * i, "levels_buffered": i, "levels_evicted": 0,
              "levels_replay_fraction": 0.5, "level_score": _quantiles(-i), "level_weights": [0.2, 0.3, 0.5]}
             for i in range(6)]
    # without a level service the driver still counts replays: none, a fraction of 0
    none = [{"env_steps": 100 * i, "episode_return_mean": 1.0, "levels_replay_fraction": 0.0} for i in range(3)]
    _write_level_run(tmp_path / "bufsyn", "env: {id: CartPole-v1, num_levels: 0}\n"
                                          "levels: {strategy: value_l1, buffer_size: 8}\n", buf)
    _write_level_run(tmp_path / "setsyn", "env: {id: 'procgen:coinrun', num_levels: 3}\n"
                                          "levels: {strategy: value_l1}\n", fixed)
    _write_level_run(tmp_path / "nolevels", "env: {id: CartPole-v1, num_levels: 0}\nlevels: {strategy: random}\n",
                     none)
    b, s = "bufsyn (value_l1, level buffer)", "setsyn (value_l1)"

    steps, q = score_quantiles(load_run(tmp_path / "bufsyn")["records"])
    assert steps.tolist() == [100, 200, 300, 400, 500]  # the record without scored levels has no point
    for key, offset in (("min", -2), ("p25", -1), ("median", 0), ("p75", 1), ("max", 2)):
        assert q[key].tolist() == [i + offset for i in (1.0, 2.0, 3.0, 4.0, 5.0)]

    out = tmp_path / "out"
    runs = [tmp_path / "bufsyn", tmp_path / "setsyn", tmp_path / "nolevels"]
    figs = make_report(runs, out)
    assert figs["level_buffer"]["path"] == str(out / "level_buffer.png")
    assert _png_size(out / "level_buffer.png") == (500, 1400)
    assert figs["level_buffer"]["series"] == [f"{b} score median", f"{s} score median", f"{b} levels buffered",
                                              f"{s} levels buffered", f"{b} replay fraction", f"{s} replay fraction"]
    assert figs["level_weights"]["series"] == [s] and figs["level_weights"]["shape"] == [6, 3]
    # no checkpoint holds the synthetic buffer's state: its gallery is skipped, with the reason
    assert figs["level_gallery"]["path"] is None and "a buffer's" in figs["level_gallery"]["skipped"]
    # a comparison by strategy keeps a buffer run and a fixed-set run of the same strategy apart
    assert set(group_runs([load_run(p) for p in runs[:2]], "levels.strategy")) == {
        "levels.strategy=value_l1, level buffer", "levels.strategy=value_l1"}

    skipped = make_report([tmp_path / "nolevels"], tmp_path / "none")["level_buffer"]
    assert skipped["path"] is None and skipped["series"] == []
    assert skipped["skipped"].startswith("no run has level_score, levels_buffered or levels_replay_fraction")
    assert not (tmp_path / "none" / "level_buffer.png").exists()
    assert f"- level_buffer: skipped ({skipped['skipped']})" in (tmp_path / "none" / "summary.md").read_text()
    # none of these is a maze run: no level complexity records, so no curriculum complexity figure
    assert figs["curriculum_complexity"]["path"] is None and not (out / "curriculum_complexity.png").exists()


def _episodes(seeds: list[int], scores: list[float]):
    """One finished episode per level `seeds[j]`, in that order, with the (value_l1) score `scores[j]`."""
    from tests.support import episode_results

    return episode_results(seeds, scores)


def test_gallery_draws_a_level_buffer(tmp_path):
    """A real `LevelBuffer` of capacity 8 fed 12 scored levels keeps the 8 highest; the gallery reads it from a
    checkpoint and from the level service's snapshot (the newer, so the end of the run), and lists the buffered
    seeds by P = 0.9 P_rank + 0.1 P_staleness, checked against a float64 reference."""
    import os

    from levelray.contracts.config import LevelConfig
    from levelray.deploy.report.gallery import choose_levels, sampler_points
    from levelray.deploy.report.runs import label_runs
    from levelray.deploy.rundir import RunDir
    from levelray.level_service.buffer import LevelBuffer
    from levelray.level_service.service import LevelServiceCore

    cfg = LevelConfig(strategy="value_l1", buffer_size=8)
    seeds = [1000 + 7 * j for j in range(12)]
    scores = np.random.default_rng(3).permutation(np.arange(1, 13) / 4).tolist()  # distinct
    first, second = _episodes(seeds[:6], scores[:6]), _episodes(seeds[6:], scores[6:])
    run = tmp_path / "bufrun"
    _write_level_run(run, "env: {id: CartPole-v1, num_levels: 0}\nlevels: {strategy: value_l1, buffer_size: 8}\n",
                     [{"env_steps": 64, "episode_return_mean": 10.0}])
    buffer = LevelBuffer(0, cfg, rng=0)
    buffer.update_with_episodes(first)
    ckpt = RunDir(run).save_checkpoint(3, {}, {"env_steps": 48}, level_state=buffer.state_dict())
    os.utime(ckpt / "levels.msgpack", (1e9, 1e9))  # written well before the service's snapshot below
    service = LevelServiceCore(None, cfg, rng=0, snapshot_path=str(run / "services" / "levels.msgpack"))
    for feedback in (first, second):
        service.report_episodes(feedback)
    service.snapshot()

    top = sorted(zip(scores, seeds, strict=True), reverse=True)  # the reference: highest score first
    rank_w = np.arange(1, 9, dtype=np.float64) ** -10.0  # rank transform, temperature 0.1
    p_ref = 0.9 * rank_w / rank_w.sum() + 0.1 / 8  # no level drawn yet: every staleness 0, uniform
    runs = [load_run(run)]
    label_runs(runs)
    view = sampler_points(runs[0])[0]["view"]
    assert view.buffered and view.capacity == 8 and sorted(view.seeds.tolist()) == sorted(s for _, s in top[:8])
    most, least = choose_levels(view, k=3)
    assert [lv["seed"] for lv in most] == [s for _, s in top[:3]]
    assert [lv["seed"] for lv in least] == [s for _, s in top[5:8]][::-1]  # the lowest P first
    np.testing.assert_allclose([lv["p"] for lv in most], p_ref[:3], rtol=1e-12)

    figs = make_report([run], tmp_path / "out")
    gallery = figs["level_gallery"]
    label = "bufrun (value_l1, level buffer)"
    assert gallery["series"] == [label] and len(gallery["paths"]) == 2
    end, earlier = gallery["galleries"][0]["points"]
    assert end["source"].startswith("level service snapshot") and end["env_steps"] is None
    assert earlier["source"] == f"checkpoint {ckpt.name}" and earlier["env_steps"] == 48
    assert end["buffered"] and (end["num_seen"], end["num_levels"]) == (8, 8)
    assert [(lv["seed"], lv["score"]) for lv in end["most"]] == [(s, c) for c, s in top[:8]]
    np.testing.assert_allclose([lv["p"] for lv in end["most"]], p_ref, rtol=1e-12)
    assert all(lv["staleness"] == 0 for lv in end["most"]) and end["least"] == []
    # the checkpoint's buffer had only the first 6 levels, all buffered (capacity 8)
    assert earlier["num_seen"] == 6 and [lv["seed"] for lv in earlier["most"]] == [
        s for _, s in sorted(zip(scores[:6], seeds[:6], strict=True), reverse=True)]
    for point in (end, earlier):
        height, width = _png_size(tmp_path / "out" / f"level_gallery_run1_{point['env_steps'] or 'final'}.png")
        assert height > 0 and width == 1600
    assert level_matrix(runs[0], "weights") is None  # no per-seed heat map of a buffer

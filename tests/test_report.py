"""`levelray report`: every figure from real short runs (PLR, uniform, a CartPole run with replay)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from levelray.deploy.cli import main
from levelray.deploy.report import make_report
from levelray.deploy.report_runs import level_matrix, load_run

TINY = ["--backend", "inline", "--num-actors", "1", "--envs-per-actor", "2", "--unroll-length", "8",
        "--metrics-port", "0", "--report-interval", "0", "--quiet"]
# 512 steps: a few BigFish episodes end (so there are returns and seen levels); a checkpoint every 8
# updates gives the level heat maps 4 rows; held-out evaluations every 16 updates where the runner has them
BIGFISH = [*TINY, "--env", "procgen:bigfish", "--num-levels", "200", "--batch-size", "1", "--total-steps", "512",
           "--checkpoint-interval", "8", "--keep-checkpoints", "100", "--eval-interval", "16", "--eval-episodes", "2",
           "--eval-envs", "2"]
FIGURES = ("returns", "throughput", "policy_lag", "losses", "level_weights", "level_staleness", "replay_priorities")
PLR, UNI, CP = "plr (value_l1)", "uni (random)", "cp (unbounded levels)"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny batches; spinning threads crawl on a loaded machine
    try:
        root = tmp_path_factory.mktemp("report")
        assert main(["train", *BIGFISH, "--run-dir", str(root / "plr")]) == 0
        assert main(["train", *BIGFISH, "--level-strategy", "random", "--run-dir", str(root / "uni")]) == 0
        assert main(["train", *TINY, "--env", "CartPole-v1", "--num-levels", "0", "--batch-size", "2",
                     "--replay-ratio", "0.5", "--replay-min-size", "2", "--total-steps", "320",
                     "--run-dir", str(root / "cp")]) == 0
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
    from levelray.deploy.report_runs import group_curve, group_runs, load_run

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

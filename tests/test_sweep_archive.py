"""benchmarks/sweep_archive.py: a sweep stopped midway, saved into an archive folder and restored on another path,
is continued by a fresh `levelray sweep --dir`: the finished trial is not run again and keeps its numbers, the
unfinished one continues the same run from its saved checkpoint. The archive keeps no weights of a finished trial,
all of an unfinished one's newest checkpoint; a `--require`d file missing from a finished trial, or a restore over an
existing sweep, is refused before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_sweep import SHORT_AND_LONG, kill_once_checkpointed, spec_dict, write_spec

from benchmarks.sweep_archive import ArchiveError, main, restore, save
from levelray.deploy.cli import main as levelray
from levelray.deploy.sweep.trial import TrialLog


def _stopped_sweep(tmp_path: Path) -> tuple[Path, Path]:
    """(spec, sweep dir) of a sweep killed once `short-seed0` has finished and `long-seed0` has checkpointed."""
    spec = write_spec(tmp_path / "archive.yaml", spec_dict(arms=SHORT_AND_LONG, baseline="short", seeds=[0]))
    sweep = tmp_path / "sweep"
    kill_once_checkpointed(spec, sweep)
    return spec, sweep


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


@pytest.mark.timeout(420)
def test_a_saved_and_restored_sweep_continues_where_it_stopped_without_rerunning_finished_trials(ray_session,
                                                                                                 tmp_path, capsys):
    spec, sweep = _stopped_sweep(tmp_path)
    archive, again = tmp_path / "archive", tmp_path / "again"

    # refused before anything is written: a finished trial without the required analysis file
    with pytest.raises(ArchiveError, match="short-seed0/evaluate-mirror.json"):
        save(sweep, archive, ["evaluate-mirror.json"])
    assert not archive.exists()

    assert main(["save", str(sweep), str(archive), "--require", "evaluate.json"]) == 0
    out = capsys.readouterr().out
    newest = sorted((sweep / "trials" / "long-seed0" / "checkpoints").glob("ckpt-*"))[-1].name
    assert "short-seed0: finished" in out and f"long-seed0: continues from {newest}" in out
    saved_short, saved_long = archive / "trials" / "short-seed0", archive / "trials" / "long-seed0"
    short_ckpts = sorted(p.name for p in (sweep / "trials" / "short-seed0" / "checkpoints").iterdir())
    assert _files(saved_short) == ({"config.yaml", "run.json", "metrics.jsonl", "trial.jsonl", "evaluate.json"}
                                   | {f"checkpoints/{c}/meta.json" for c in short_ckpts})  # no learner.pt
    assert _files(saved_long) >= {f"checkpoints/{newest}/learner.pt", f"checkpoints/{newest}/meta.json"}
    assert {p.name for p in (saved_long / "checkpoints").iterdir()} == {newest}
    short_metrics = (saved_short / "metrics.jsonl").read_bytes()
    run_id = json.loads((saved_long / "run.json").read_text())["run_id"]

    assert (archive / "sweep.yaml").read_bytes() == (sweep / "sweep.yaml").read_bytes()
    assert restore(archive, again) == ["long-seed0", "short-seed0"]
    assert not (again / "sweep.yaml").exists()  # the fresh sweep writes its own
    with pytest.raises(ArchiveError, match="holds a sweep already"):
        restore(archive, again)
    assert levelray(["sweep", str(spec), "--dir", str(again), "--max-concurrent", "1"]) == 0
    results = json.loads((again / "results.json").read_text())
    status = {t["name"]: t for t in results["trials"]}
    assert status["short-seed0"]["status"] == "done" and status["short-seed0"]["starts"] == 1  # not run again
    assert (again / "trials" / "short-seed0" / "metrics.jsonl").read_bytes() == short_metrics
    long = again / "trials" / "long-seed0"
    starts = [e for e in TrialLog(long).events() if e["event"] == "start"]
    assert [s["resumed_from"] for s in starts] == [None, newest]  # the saved checkpoint, continued
    assert json.loads((long / "run.json").read_text())["run_id"] == run_id
    last = json.loads((long / "metrics.jsonl").read_text().splitlines()[-1])
    assert status["long-seed0"]["status"] == "done" and last["env_steps"] >= 60_000


def test_a_folder_without_trials_is_refused_naming_it(tmp_path, capsys):
    assert main(["save", str(tmp_path), str(tmp_path / "archive")]) == 2
    assert f"{tmp_path} is not a sweep directory" in capsys.readouterr().err
    assert not (tmp_path / "archive").exists()

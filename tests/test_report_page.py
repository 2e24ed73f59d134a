"""`levelray report --out DIR` writes DIR/index.html; a real headless Chromium opens it, takes a screenshot and
reports whether every image and video on it loaded. The runs are real and tiny: a PLR MiniGrid run whose levels
the gallery draws (and an MP4 beside it), and a CartPole run without a level set."""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from levelray.contracts import snapshot
from levelray.deploy.cli import main
from levelray.deploy.report.command import make_report
from levelray.level_service.sampler import LevelSampler
from tests.test_report import TINY

INSTALL_LOG = Path(os.environ.get("TMPDIR", "/tmp")) / "levelray-install-chromium.log"
# Short episodes (a 10-step limit) so that most of the 40 levels are scored within 640 steps; a checkpoint every
# 8 updates gives the gallery earlier points.
MAZE = [*TINY, "--env", "minigrid:DoorKey-5x5", "--num-levels", "40", "--max-episode-steps", "10",
        "--batch-size", "1", "--total-steps", "640", "--checkpoint-interval", "8", "--keep-checkpoints", "100"]
ODD_NAME = "cart<pole>&co"  # a run directory whose name must be escaped on the page


def chromium() -> str:
    path = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    if path is None:
        why = INSTALL_LOG.read_text().strip() if INSTALL_LOG.exists() else "run deploy/setup/install-chromium.sh"
        pytest.skip(f"no chromium binary: {why}")
    return path


def write_mp4(path: Path, frames: int = 12, size: int = 96) -> None:
    """A real H.264 MP4 (imageio's PyAV plugin, the FFmpeg in the av wheel), as the videos of `levelray
    evaluate --video` are written: a bright square moving over a dark background."""
    import imageio.v3 as iio

    path.parent.mkdir(parents=True, exist_ok=True)
    images = np.full((frames, size, size, 3), 30, dtype=np.uint8)
    for t in range(frames):
        images[t, 20:50, 4 + 6 * t:34 + 6 * t] = (240, 200, 40)
    iio.imwrite(path, images, plugin="pyav", codec="libx264", fps=8)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        root = tmp_path_factory.mktemp("page")
        assert main(["train", *MAZE, "--run-dir", str(root / "maze")]) == 0
        assert main(["train", *TINY, "--env", "CartPole-v1", "--num-levels", "0", "--level-strategy", "random",
                     "--batch-size", "2",
                     "--total-steps", "160", "--learning-rate", "0.001", "--run-dir", str(root / ODD_NAME)]) == 0
    finally:
        torch.set_num_threads(before)
    write_mp4(root / "maze" / "videos" / "test-seed7-return0.5.mp4")
    write_mp4(root / "maze" / "eval out" / "held out #1.mp4")  # as `evaluate --video` may have named it
    return root


def run_chromium(*args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--no-first-run", *args], capture_output=True, text=True, timeout=timeout)


def load_outcomes(page: Path, profile: Path) -> dict[str, list[tuple[str, str]]]:
    """{"img": [(src, data-loaded)], "video": [(first source, data-loaded)], "body": [(key, value)]} of the
    DOM after the page's script ran (Chromium --dump-dom, 5 s of virtual time for the loads)."""
    proc = run_chromium(f"--user-data-dir={profile}", "--virtual-time-budget=5000", "--dump-dom", page.as_uri())
    dom = proc.stdout
    assert "<body" in dom, proc.stderr[-3000:]
    imgs = [(m.group(1), m.group(2)) for m in re.finditer(r"<img\b[^>]*?src=\"([^\"]*)\"[^>]*?data-loaded=\"(\w+)\"",
                                                          dom)]
    videos = [(m.group(2), m.group(1) + ("+frame" if 'data-frame="decoded"' in m.group(0) else ""))
              for m in re.finditer(r"<video\b[^>]*?data-loaded=\"(\w+)\"[^>]*>\s*<source src=\"([^\"]*)\"", dom)]
    body = re.search(r"<body\b([^>]*)>", dom).group(1)
    return {"img": imgs, "all_img": re.findall(r"<img\b", dom), "video": videos,
            "all_video": re.findall(r"<video\b", dom), "body": re.findall(r"data-load-(\w+)=\"(\d+)\"", body),
            "dom": dom}


@pytest.mark.timeout(600)
def test_report_page_loads_in_headless_chromium(runs, tmp_path):
    out = tmp_path / "report"
    figs = make_report([runs / "maze", runs / ODD_NAME], out)
    page = Path(figs["page"]["path"])
    assert page == out / "index.html"
    text = page.read_text()
    # self-contained: nothing fetched from the network, every reference relative to DIR
    assert not re.search(r"(src|href)=\"(https?:)?//", text)
    assert html.escape(ODD_NAME) in text and ODD_NAME not in text

    gallery = figs["level_gallery"]
    assert gallery["series"] == ["maze (value_l1)"] and len(gallery["paths"]) >= 2  # the end and earlier points
    assert sorted((out / "videos").iterdir()) == [out / "videos" / "run1-eval_out-held_out__1.mp4",
                                                  out / "videos" / "run1-videos-test-seed7-return0.5.mp4"]

    res = load_outcomes(page, tmp_path / "profile")
    figures = [f for n, f in figs.items() if n not in ("level_gallery", "summary", "page") and f.get("path")]
    assert len(res["all_img"]) == len(res["img"]) == len(figures) + len(gallery["paths"])
    assert {src for src, _ in res["img"]} == {Path(f["path"]).name for f in figures} | {
        Path(p).name for p in gallery["paths"]}
    assert all(outcome == "ok" for _, outcome in res["img"]), res["img"]
    assert len(res["all_video"]) == len(res["video"]) == 2
    # metadata loaded and the first frame decoded: this Chromium plays the H.264 MP4s
    assert all(outcome == "ok+frame" for _, outcome in res["video"]), res["video"]
    total = len(res["img"]) + 2
    assert dict(res["body"]) == {"ok": str(total), "error": "0", "total": str(total)}
    # the run whose directory name holds markup shows as text, not as an element
    assert html.escape(ODD_NAME) in res["dom"] and "<pole>" not in res["dom"]

    shot = tmp_path / "page.png"
    proc = run_chromium(f"--user-data-dir={tmp_path / 'profile2'}", f"--screenshot={shot}",
                        "--window-size=1280,2000", "--virtual-time-budget=5000", page.as_uri())
    assert shot.exists(), proc.stderr[-3000:]
    from matplotlib.image import imread

    pixels = imread(shot)  # float RGB(A) in [0, 1]
    assert pixels.shape[:2] == (2000, 1280)
    assert pixels[..., :3].std() > 0.05  # not a blank (one-colour) page


@pytest.mark.timeout(300)
def test_page_check_sees_a_broken_reference(runs, tmp_path):
    """The load check can fail: a page with a missing image and a missing video reports both as errors."""
    out = tmp_path / "report"
    make_report([runs / ODD_NAME], out)
    text = (out / "index.html").read_text()
    first = re.search(r"<img\b[^>]*?src=\"([^\"]+)\"", text).group(1)
    broken = text.replace(f'src="{first}"', 'src="no-such-figure.png"', 1).replace(
        "</section>\n<script>", '<video controls preload="metadata"><source src="videos/none.mp4" type="video/mp4">'
                               "</video></section>\n<script>", 1)
    assert broken.count("none.mp4") == 1 and "no-such-figure.png" in broken
    (out / "broken.html").write_text(broken)
    res = load_outcomes(out / "broken.html", tmp_path / "profile")
    outcomes = dict(res["img"])
    assert outcomes.pop("no-such-figure.png") == "error" and set(outcomes.values()) == {"ok"}
    assert res["video"] == [("videos/none.mp4", "error")]
    assert dict(res["body"])["error"] == "2"


def test_gallery_shows_the_most_and_least_likely_levels(runs, tmp_path):
    """The end-of-run gallery's levels are the latest checkpoint's top and bottom 16 seen levels by PLR's replay
    probability, captioned from the same sampler state; a run without a level set has no gallery, with the
    reason."""
    figs = make_report([runs / "maze"], tmp_path / "one")
    point = figs["level_gallery"]["galleries"][0]["points"][0]
    latest = sorted((runs / "maze" / "checkpoints").glob("ckpt-*"))[-1]
    sampler = LevelSampler.from_state_dict(snapshot.load(latest / "levels.msgpack"))
    assert point["source"] == f"checkpoint {latest.name}"
    p, seen, seeds = sampler.sample_weights(), sampler.seen(), sampler.seeds
    assert sampler.num_seen >= 32 and point["num_seen"] == sampler.num_seen
    by_p = sorted((-p[i], int(seeds[i])) for i in np.flatnonzero(seen))
    assert [lv["seed"] for lv in point["most"]] == [s for _, s in by_p[:16]]
    rest = sorted((-negative_p, seed) for negative_p, seed in by_p[16:])  # P ascending, then seed
    assert [lv["seed"] for lv in point["least"]] == [seed for _, seed in rest[:16]]
    index = {int(s): i for i, s in enumerate(seeds)}
    for lv in point["most"] + point["least"]:
        i = index[lv["seed"]]
        assert lv["p"] == p[i] and lv["score"] == sampler.scores()[i] and lv["staleness"] == sampler.staleness()[i]
    assert point["most"][0]["p"] >= point["most"][-1]["p"] >= point["least"][-1]["p"] >= point["least"][0]["p"]

    none = make_report([runs / ODD_NAME], tmp_path / "none")["level_gallery"]
    assert none["path"] is None and "--num-levels 0" in none["skipped"]


def test_make_test_installs_chromium_before_pytest():
    root = Path(__file__).resolve().parents[1]
    recipe = re.search(r"^test:.*\n((?:\t.*\n)+)", (root / "Makefile").read_text(), flags=re.M).group(1)
    lines = [x.strip() for x in recipe.splitlines()]
    install = lines.index("sh deploy/setup/install-chromium.sh")
    assert install < next(i for i, x in enumerate(lines) if "pytest" in x)
    script = root / "deploy" / "setup" / "install-chromium.sh"
    assert subprocess.run(["sh", "-n", str(script)], capture_output=True).returncode == 0
    assert os.access(script, os.X_OK)
    chromium()  # skips, quoting the install log, where it could not be installed
    start = time.monotonic()
    proc = subprocess.run(["sh", str(script)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and time.monotonic() - start < 5, proc.stdout + proc.stderr

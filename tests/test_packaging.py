"""The distribution installs one import name, `levelray`, and nothing else at the top level of
site-packages (`contracts` or `deploy` there would collide with other projects' packages)."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(300)
def test_the_wheel_holds_only_the_levelray_namespace(tmp_path):
    # A copy of the source, so the build leaves nothing (build/, *.egg-info) in the checkout.
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".venv*", ".git", "build", "runs", "*.so", "__pycache__",
                                                              "*.egg-info", "out"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                    "-w", str(tmp_path), str(src)], check=True, cwd=tmp_path, timeout=280)
    (wheel,) = tmp_path.glob("levelray-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/")[0] for name in names if not name.split("/")[0].endswith((".dist-info", ".data"))}
    assert top_level == {"levelray"}, top_level
    for part in ("contracts", "actors", "learner", "level_service", "replay_service", "deploy"):
        assert f"levelray/{part}/__init__.py" in names, part
    assert "levelray/learner/vtrace.py" in names
    dist_info = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "levelray = levelray.deploy.cli:main" in zipfile.ZipFile(wheel).read(dist_info).decode()


def test_the_installed_package_imports_from_the_namespace_only():
    """`import learner` must not resolve to this project from a directory other than the checkout."""
    code = ("import importlib.util, levelray.learner.vtrace, levelray.deploy.cli;"
            "print(all(importlib.util.find_spec(n) is None for n in "
            "('actors', 'contracts', 'deploy', 'learner', 'level_service', 'replay_service')))")
    out = subprocess.run([sys.executable, "-P", "-c", code], cwd="/", capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"

"""The distribution installs one import name, `levelray`, and nothing else at the top level of
site-packages (`contracts` or `deploy` there would collide with other projects' packages)."""

import importlib.metadata
import re
import shutil
import subprocess
import sys
import tomllib
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
    for part in ("contracts", "actors", "learner", "level_service", "replay_service", "families", "deploy"):
        assert f"levelray/{part}/__init__.py" in names, part
    assert "levelray/learner/vtrace.py" in names
    assert "levelray/families/maze/suite/spiral.txt" in names  # package data: the maze test suite
    dist_info = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "levelray = levelray.deploy.cli:main" in zipfile.ZipFile(wheel).read(dist_info).decode()


def test_the_installed_package_imports_from_the_namespace_only():
    """`import learner` must not resolve to this project from a directory other than the checkout."""
    code = ("import importlib.util, levelray.learner.vtrace, levelray.deploy.cli;"
            "print(all(importlib.util.find_spec(n) is None for n in "
            "('actors', 'contracts', 'deploy', 'families', 'learner', 'level_service', 'replay_service')))")
    out = subprocess.run([sys.executable, "-P", "-c", code], cwd="/", capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


def _pins(lines) -> dict[str, str]:
    """`name==version` lines -> {normalised name: version} (extras and comments dropped)."""
    pins = {}
    for line in lines:
        spec = line.split("#")[0].strip().strip('",')
        if "==" in spec:
            name, version = spec.split("==")
            pins[re.sub(r"[-_.]+", "-", name.split("[")[0]).lower()] = version.strip()
    return pins


def test_constraints_agree_with_pyproject_and_the_installed_versions():
    """constraints.txt pins what the direct dependencies pull in: it must not contradict a pin of pyproject.toml
    (pip would refuse to install), must leave torch to pyproject (the build differs by machine), and is what
    this venv has installed, so the suite ran with exactly those versions."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    direct = _pins([*project["dependencies"], *(d for ds in project["optional-dependencies"].values() for d in ds)])
    constraints = _pins((ROOT / "constraints.txt").read_text().splitlines())
    assert "torch" not in constraints and "levelray" not in constraints
    assert {"pygame", "ray", "numpy", "pytest"} <= set(constraints)  # transitive and direct, test extras too
    for name, version in direct.items():
        if name != "torch":
            assert constraints.get(name, version) == version, (name, version, constraints.get(name))
    mismatched = {}
    for name, version in constraints.items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # an optional extra of this venv that is not installed here
        if installed != version:
            mismatched[name] = (version, installed)
    assert not mismatched, f"constraints.txt vs this venv: {mismatched} (regenerate it, see its header)"

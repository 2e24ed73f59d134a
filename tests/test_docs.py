"""The documentation site builds strictly (a broken link, a missing page or one left out of the nav fails), and its
generated reference covers the code: every config key and flag, every command, every exported metric."""

from __future__ import annotations

import argparse
import html
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from levelray.contracts.config import flag_name, leaves
from levelray.contracts.trajectory import Unroll
from levelray.deploy.cli import build_parser
from levelray.deploy.monitoring.metrics import METRICS

ROOT = Path(__file__).resolve().parents[1]


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except ModuleNotFoundError:  # its parent package is missing
        return True


MISSING = [m for m in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python") if _missing(m)]
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"the docs extra is not installed (no {', '.join(MISSING)}): "
                                                      "pip install -e '.[docs]' (make install does)")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    # not --quiet: it drops the warnings before --strict counts them, and a broken link would pass
    build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                           cwd=ROOT, capture_output=True, text=True, timeout=240,
                           env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert build.returncode == 0, f"mkdocs build --strict failed:\n{build.stdout}\n{build.stderr}"
    return out


def page(site: Path, name: str) -> str:
    path = site / name / "index.html"
    assert path.exists(), f"{name}: not in the built site"
    return path.read_text()


def codes(text: str) -> set[str]:
    """The inline code spans of a page, unescaped: where the reference pages put keys, flags and names."""
    spans = set()
    for chunk in text.split("<code>")[1:]:
        spans.add(html.unescape(chunk.split("</code>", 1)[0]))
    return spans


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser, _dests = build_parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


@pytest.mark.timeout(300)
def test_config_reference_lists_every_key_with_its_flag(site):
    text = page(site, "reference/config")
    spans = codes(text)
    missing = [path for path, _f, _tp in leaves() if path not in spans]
    assert not missing, f"config keys not in the config reference: {missing}"
    missing = [flag_name(path, f) for path, f, _tp in leaves() if flag_name(path, f) not in spans]
    assert not missing, f"flags not in the config reference: {missing}"
    # the help text is escaped, not read as HTML: `procgen:<game>` stays visible
    assert "procgen:&lt;game&gt;" in text
    # exactly the keys a resumed run may change are marked so (in the key tables, before the presets' table)
    rows = [row.split("</tr>", 1)[0] for row in text.split('id="presets"')[0].split("<tr>\n<td><code>")[1:]]
    marked = {html.unescape(row.split("</code>", 1)[0]) for row in rows if "may change on resume" in row}
    assert marked == {path for path, f, _tp in leaves() if f.metadata.get("resumable")}


@pytest.mark.timeout(300)
def test_commands_reference_lists_every_command_and_every_flag(site):
    text = page(site, "reference/commands")
    spans = codes(text)
    for name, sub in subcommands().items():
        assert f'id="{name}"' in text, f"command {name}: no section in the commands reference"
        flags = [s for a in sub._actions if not isinstance(a, argparse._HelpAction) for s in a.option_strings[:1]]
        missing = [flag for flag in flags if flag not in spans]
        assert not missing, f"levelray {name}: flags not in the commands reference: {missing}"
    # every config key's flag is a `train` flag
    assert {flag_name(path, f) for path, f, _tp in leaves()} <= spans


@pytest.mark.timeout(300)
def test_metrics_reference_lists_every_exported_metric(site):
    spans = codes(page(site, "reference/metrics"))
    missing = [name for name in METRICS if name not in spans]
    assert not missing, f"metrics not in the metrics reference: {missing}"


@pytest.mark.timeout(300)
def test_trajectory_reference_lists_every_unroll_field(site):
    spans = codes(page(site, "reference/trajectory"))
    missing = [name for name in Unroll.__annotations__ if name not in spans]
    assert not missing, missing


@pytest.mark.timeout(300)
def test_api_reference_renders_the_docstrings_and_results_are_copied(site):
    api = page(site, "reference/api")
    for name in ("levelray.train", "levelray.evaluate", "levelray.contracts.config.RunConfig"):
        assert f'id="{name}"' in api, f"{name}: mkdocstrings rendered no section for it"
    assert "Returns the run's last" in api  # levelray.train's docstring, not only its heading
    results = page(site, "results/RESULTS")
    first_heading = (ROOT / "benchmarks" / "RESULTS.md").read_text().splitlines()[0].lstrip("# ").strip()
    assert first_heading in results

"""The package stays readable in pieces: no function longer than a screen (80 lines, from its `def` to its
last line) and no module longer than 500 lines. Tests and benchmarks are not held to it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ("actors", "contracts", "deploy", "families", "learner", "level_service", "levelray", "policy",
           "replay_service")
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 500


def _modules() -> list[Path]:
    return [path for folder in PACKAGE for path in sorted((ROOT / folder).rglob("*.py"))]


def test_the_package_has_modules_to_check():
    assert len(_modules()) > 50


def test_no_module_is_longer_than_500_lines():
    lengths = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in _modules()}
    long = {name: n for name, n in lengths.items() if n > MAX_MODULE_LINES}
    assert not long, long


def test_no_function_is_longer_than_80_lines():
    long = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = length
    assert not long, long

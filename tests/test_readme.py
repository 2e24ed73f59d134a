"""README stays true: every flag and every exported metric is documented there, and its first two
commands are the Makefile targets CI runs."""

import re
from pathlib import Path

from levelray.contracts.config import flag_name, leaves
from levelray.deploy.metrics import METRICS

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_every_flag_is_documented():
    missing = [flag_name(p, f) for p, f, _ in leaves() if f"`{flag_name(p, f)}`" not in README]
    assert not missing, missing


def test_every_metric_is_documented():
    missing = [name for name in METRICS if f"`{name}`" not in README]
    assert not missing, missing


def test_first_two_commands_are_train_and_test_and_ci_runs_the_test_command():
    commands = re.findall(r"^make (\w+)", README, flags=re.M)
    assert commands[:2] == ["train", "test"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^train: ", makefile, flags=re.M) and re.search(r"^test: ", makefile, flags=re.M)

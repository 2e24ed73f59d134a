"""`--help` of every command says what the flags do and what they default to."""

from __future__ import annotations

import re

import pytest

from levelray.contracts.config import RunConfig, flag_name, leaves
from levelray.deploy.cli import main

COMMANDS = ("train", "scale", "status", "evaluate", "report")


def help_text(capsys, command: str) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # argparse wraps lines where it likes


@pytest.mark.parametrize("command", COMMANDS)
def test_help_shows_no_placeholder_objects(capsys, command):
    text = help_text(capsys, command)
    assert "<object object" not in text and "==SUPPRESS==" not in text
    assert text.startswith(f"usage: levelray {command}")


def test_train_help_gives_every_config_flag_its_real_default(capsys):
    text = help_text(capsys, "train")
    defaults = RunConfig()
    for path, f, _tp in leaves():
        value = defaults
        for part in path.split("."):
            value = getattr(value, part)
        if isinstance(value, (list, tuple)):
            shown = ",".join(map(str, value))
        else:
            shown = "none" if value is None else str(value)
        flag = flag_name(path, f)
        # the flag's own help entry (after the usage block), up to the next flag's entry
        entry = re.search(rf"(?:^| ){re.escape(flag)} \[?[A-Z_]+\]? (.*?)(?= --[a-z]|$)", text.split("options:", 1)[1])
        assert entry is not None, flag
        assert f"(default: {shown})" in entry.group(1), (flag, entry.group(1))


def test_the_command_list_says_report_writes_an_html_page(capsys):
    """`levelray --help` describes `report` by what it writes: one HTML page (`deploy.report.html`, index.html)."""
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    entry = re.search(r" report (.*?) sweep ", text.split("positional arguments:", 1)[1])
    assert entry is not None and "HTML page" in entry.group(1) and "Markdown" not in entry.group(1), text

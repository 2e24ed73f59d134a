"""benchmarks.tables_md: the tables `print_table` printed, read back as Markdown with every cell as printed."""

from __future__ import annotations

import random

from benchmarks.common import print_table
from benchmarks.tables_md import convert


def printed(capsys, *tables) -> list[str]:
    for rows, columns, title in tables:
        print_table(rows, columns, title=title)
    return capsys.readouterr().out.splitlines()


def test_random_tables_come_back_cell_for_cell_with_the_lines_between_kept(capsys):
    rng = random.Random(0)
    words = ["dr", "robust", "0.320 ± 0.095", "-0.124", "-", "20,000,000", "a b", "maze | mirror", "1.00 / 0.94"]
    tables = []
    for t in range(4):
        columns = [f"col {c}" + "x" * rng.randrange(3) for c in range(rng.randrange(1, 6))]
        rows = [[rng.choice(words) for _ in columns] for _ in range(rng.randrange(1, 5))]
        tables.append((rows, columns, f"title {t}" if t % 2 else None))
    lines = convert(printed(capsys, *tables))
    tables_back, current = [], None
    for line in lines:
        if line.startswith("| "):
            cells = [c.replace("\0", "|") for c in line[2:-2].replace("\\|", "\0").split(" | ")]
            if current is None:
                current = [cells]
                tables_back.append(current)
            elif cells != ["---"] * len(cells):
                current.append(cells)
        else:
            current = None
    assert tables_back == [[columns, *rows] for rows, columns, _ in tables]
    assert [line for line in lines if line.startswith("title")] == ["title 1", "title 3"]
    for before, line in zip(lines, lines[1:], strict=False):  # a table is set apart from the text around it,
        if line.startswith("| ") != before.startswith("| "):  # as Markdown needs, by one blank line
            assert "" in (before, line), (before, line)
    assert ("", "") not in zip(lines, lines[1:], strict=False)


def test_text_without_a_rule_passes_through_unchanged():
    text = ["maze:13x13, budgets [4000000]", "", "fresh levels (DR): 30.7/9.6 (94% solvable)", "a - b", "---x"]
    assert convert(text) == text

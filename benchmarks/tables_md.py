"""The text tables a benchmark script printed (`benchmarks.common.print_table`) as Markdown tables, for RESULTS.md.

    python -m benchmarks.dcd_maze --analyse --out-dir DIR > out.txt
    python -m benchmarks.tables_md < out.txt > out.md

A printed table is a header line, a rule of dashes (one run per column, two spaces apart) and its rows; every
cell is right-aligned to its column's rule, so a cell is the text between the end of the column before and the
end of its own rule, and a row is as long as the rule. Lines of no table (titles, notes) pass through as they
are, set apart from a table by a blank line, so the numbers in RESULTS are the script's own, character for
character.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable

RULE = re.compile(r"-+")


def rule_spans(line: str) -> list[tuple[int, int]] | None:
    """The `(start, end)` of each column's dashes where `line` is a table's rule (only dashes and spaces, at least
    one run), else None."""
    if not line.strip() or set(line.rstrip()) - {"-", " "}:
        return None
    return [m.span() for m in RULE.finditer(line)]


def fits(line: str, spans: list[tuple[int, int]]) -> bool:
    """Whether `line` is a row under the rule `spans`: as long as the rule, with the two spaces between columns
    (a title printed straight after a table is not)."""
    return len(line) == spans[-1][1] and all(line[start - 2:start] == "  " for start, _ in spans[1:])


def cells(line: str, spans: list[tuple[int, int]]) -> list[str]:
    """`line`'s cells under the rule `spans`: each the text from the previous column's end to its own end."""
    ends = [end for _, end in spans]
    return [line[start:end].strip().replace("|", "\\|") for start, end in zip([0, *ends], ends, strict=False)]


def markdown_row(values: list[str]) -> str:
    return "| " + " | ".join(values) + " |"


def convert(lines: Iterable[str]) -> list[str]:
    """`lines` (without newlines) with each printed table turned into a Markdown table."""
    lines, out = list(lines), []
    i = 0
    while i < len(lines):
        spans = rule_spans(lines[i + 1]) if i + 1 < len(lines) else None
        if spans is None or not lines[i].strip():
            out.append(lines[i])
            i += 1
            continue
        out += [""] if out and out[-1] else []
        out += [markdown_row(cells(lines[i], spans)), markdown_row(["---"] * len(spans))]
        i += 2
        while i < len(lines) and fits(lines[i], spans) and (i + 1 == len(lines) or rule_spans(lines[i + 1]) is None):
            out.append(markdown_row(cells(lines[i], spans)))
            i += 1
        out += [""] if i < len(lines) and lines[i].strip() else []
    return out


def main() -> int:
    for line in convert(sys.stdin.read().splitlines()):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

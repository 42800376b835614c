"""The decision records' headers (issue 42 §6): every record in docs/decisions has a date and a
status spelled one way, so a reader can tell from its first lines whether it still holds and,
when it does not, which record to read instead.

- `Date: YYYY-MM-DD`, one line of its own;
- `Status: Accepted`, `Status: Superseded by N` or `Status: Partly superseded by N` (N a record's
  four digits; several as `0013, 0016`), optionally followed by a note: ` (issue 41 §2)`,
  `. Amends decision 0051.`;
- a record named in a `Superseded by` list exists and is a later one;
- a record whose Status says it supersedes, replaces or amends an earlier one
  (`Supersedes 0019`, `Replaces, in decision 0042, …`, `Amends decision 0051`) is named in that
  one's `Superseded by` or `Partly superseded by` list, so the older record says so too.

README.md's Layout names every package of src/multibank with its purpose."""

from __future__ import annotations

import datetime
import re
from pathlib import Path

import pytest

# Reads the documents only: the SQLite half of scripts/test runs it.
pytestmark = pytest.mark.any_database

DECISIONS = Path(__file__).resolve().parents[1] / "docs" / "decisions"
RECORD_NAME = re.compile(r"(\d{4})-[a-z0-9-]+\.md")

STATUS = re.compile(
    r"Status: (?:Accepted|(?:Superseded|Partly superseded) by (?P<by>\d{4}(?:, \d{4})*))"
    r"(?=$| \(|\.(?: |$))"  # the spelling ends there: nothing, a parenthesis or a sentence
)
DATE = re.compile(r"Date: (\d{4}-\d{2}-\d{2})")
# In a record's own Status: the earlier records it supersedes, replaces or amends (in part or
# whole), up to the end of the sentence. "Extends" is not one: an extension leaves it standing.
TAKES_OVER = re.compile(r"\b(?:supersedes|replaces|amends)\b(?P<rest>.*?)(?:\.(?: |$)|$)", re.I)
NUMBER = re.compile(r"\b\d{4}\b")
# A line that looks like a header's label in any spelling: `Status:`, `**Status.**`, `date:`.
STATUS_LABEL = re.compile(r"\W{0,3}status\W{0,3}[:.]", re.I)
DATE_LABEL = re.compile(r"\W{0,3}date\W{0,3}[:.]", re.I)


def status_paragraph(text: str) -> str | None:
    """The record's `Status` line and the lines that continue it (up to a blank line), joined by
    spaces; None without one."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Status:"):
            paragraph = [line]
            for more in lines[i + 1 :]:
                if not more.strip():
                    break
                paragraph.append(more.strip())
            return " ".join(paragraph)
    return None


def superseded_by(status: str) -> list[int]:
    match = STATUS.match(status)
    if match is None or match.group("by") is None:
        return []
    return [int(n) for n in match.group("by").split(", ")]


def problems(records: dict[int, str]) -> list[str]:
    """What is wrong with the headers of `records` (number → text), one line each."""
    out: list[str] = []
    statuses: dict[int, str] = {}
    for number, text in sorted(records.items()):
        name = f"{number:04d}"
        lines = text.splitlines()
        status_lines = [line for line in lines if STATUS_LABEL.match(line)]
        status = status_paragraph(text)
        if status is None or len(status_lines) != 1:
            out.append(f"{name}: wants one line starting `Status: `, has {status_lines!r}")
        elif STATUS.match(status) is None:
            out.append(
                f"{name}: Status is not `Accepted`, `Superseded by N` or `Partly superseded by N`"
                f" (N as 0041, several as `0041, 0065`): {status[:100]!r}"
            )
        else:
            statuses[number] = status
        date_lines = [line for line in lines if DATE_LABEL.match(line)]
        dates = [m.group(1) for line in date_lines if (m := DATE.fullmatch(line))]
        if len(date_lines) != 1 or len(dates) != 1:
            out.append(f"{name}: wants one line `Date: YYYY-MM-DD`, has {date_lines!r}")
        else:
            try:
                datetime.date.fromisoformat(dates[0])
            except ValueError:
                out.append(f"{name}: {dates[0]} is no date")
    for number, status in statuses.items():
        for later in superseded_by(status):
            if later not in records:
                out.append(f"{number:04d}: superseded by {later:04d}, which is no record")
            elif later <= number:
                out.append(f"{number:04d}: superseded by {later:04d}, which is not a later record")
        for clause in TAKES_OVER.finditer(status):
            for earlier in map(int, NUMBER.findall(clause.group("rest"))):
                if earlier not in records:
                    out.append(f"{number:04d}: takes over from {earlier:04d}, which is no record")
                elif earlier in statuses and number not in superseded_by(statuses[earlier]):
                    out.append(
                        f"{number:04d} says it supersedes, replaces or amends {earlier:04d}, whose"
                        f" Status does not say `Superseded by {number:04d}` or"
                        f" `Partly superseded by {number:04d}`"
                    )
    return out


def read_records() -> dict[int, str]:
    records: dict[int, str] = {}
    for path in sorted(DECISIONS.glob("*.md")):
        match = RECORD_NAME.fullmatch(path.name)
        assert match, f"{path.name}: a record's name is NNNN-words.md"
        number = int(match.group(1))
        assert number not in records, f"two records numbered {number:04d}"
        records[number] = path.read_text(encoding="utf-8")
    return records


def test_every_record_has_a_date_and_a_status_naming_what_replaced_it() -> None:
    records = read_records()
    assert len(records) >= 77
    assert problems(records) == []


def _record(status: str, date: str = "Date: 2026-11-22") -> str:
    return f"# A record\n\n{status}\n\n{date}\n\n**Context.** Text.\n"


def test_the_check_finds_a_missing_or_malformed_date() -> None:
    records = {
        1: _record("Status: Accepted", date=""),
        2: _record("Status: Accepted", "Date: 22/11"),
    }
    assert problems(records) == [
        "0001: wants one line `Date: YYYY-MM-DD`, has []",
        "0002: wants one line `Date: YYYY-MM-DD`, has ['Date: 22/11']",
    ]


@pytest.mark.parametrize(
    "status",
    [
        "Status: accepted",
        "**Status.** Accepted.",
        "Status: Superseded (by 0002)",
        "Status: Replaced by 0002",
        "Status: Amended by 0002",
        "Status: Superseded in part by 0002",
        "Status: Partly superseded by 2",
        "Status: Partly superseded by 0002 and 0003",
        "Status: Acceptedish",
    ],
)
def test_the_check_refuses_other_spellings(status: str) -> None:
    records = {1: _record(status), 2: _record("Status: Accepted"), 3: _record("Status: Accepted")}
    found = problems(records)
    assert len(found) == 1 and found[0].startswith("0001: "), found


@pytest.mark.parametrize(
    "status",
    [
        "Status: Accepted",
        "Status: Accepted (issue 41 §2). Amends decision 0001.",
        "Status: Superseded by 0003 (the lean handler is removed)",
        "Status: Partly superseded by 0003, 0004. Point 1 is replaced.",
        "Status: Partly superseded by 0003, 0004 (a long note that goes on\nto a second line)",
    ],
)
def test_the_check_takes_the_three_spellings_with_a_note(status: str) -> None:
    records = {n: _record("Status: Accepted") for n in (3, 4)}
    records[1] = _record("Status: Partly superseded by 0002")
    records[2] = _record(status)
    assert problems(records) == []


def test_the_check_finds_a_superseding_record_that_does_not_exist() -> None:
    records = {1: _record("Status: Superseded by 0009"), 2: _record("Status: Superseded by 0001")}
    assert problems(records) == [
        "0001: superseded by 0009, which is no record",
        "0002: superseded by 0001, which is not a later record",
    ]


def test_the_check_finds_a_record_that_does_not_say_what_replaced_it() -> None:
    records = {
        1: _record("Status: Accepted"),
        2: _record("Status: Accepted"),
        3: _record("Status: Accepted (issue 33). Supersedes 0001, and the parts of 0002 that …"),
    }
    assert problems(records) == [
        "0003 says it supersedes, replaces or amends 0001, whose Status does not say"
        " `Superseded by 0003` or `Partly superseded by 0003`",
        "0003 says it supersedes, replaces or amends 0002, whose Status does not say"
        " `Superseded by 0003` or `Partly superseded by 0003`",
    ]
    records[1] = _record("Status: Superseded by 0003")
    records[2] = _record("Status: Partly superseded by 0003 (its statements on the driver)")
    assert problems(records) == []


def test_the_readmes_layout_names_every_package_with_its_purpose() -> None:
    """README.md's Layout (issue 42 §6) has a line "- `name/`: purpose" for every package of
    src/multibank, and none for a package that is gone."""
    root = DECISIONS.parents[1]
    readme = (root / "README.md").read_text(encoding="utf-8")
    layout = readme[readme.index("\n## Layout\n") :].split("\n## ", 2)[1]
    listed = set(re.findall(r"^- `([a-z0-9_]+)/`: \S", layout, re.M))
    packages = {path.parent.name for path in (root / "src" / "multibank").glob("*/__init__.py")}
    assert listed == packages

"""`multibank ... --help` speaks to operators: no Python types in the options tables (`<bool>`,
`<str>`, `<int range>`), no references to the project's decision records (D4, D5...), and every
option named and explained. The commands are read from the typer app itself, so a command added
later is checked too."""

from __future__ import annotations

import inspect
import re
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from multibank.cli import app as cli_app

# Reads the source, the documents or the help: the SQLite half of scripts/test runs it.
pytestmark = pytest.mark.any_database

PLACEHOLDERS = ("<bool>", "<str>", "<int", "<float")
DECISION = re.compile(r"\bD\d{1,2}\b")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _commands() -> list[tuple[tuple[str, ...], Any]]:
    """Every group and command of the app, as (the words after `multibank`, the command)."""
    found: list[tuple[tuple[str, ...], Any]] = []

    def walk(path: tuple[str, ...], command: Any) -> None:
        found.append((path, command))
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            walk((*path, name), sub)

    walk((), typer.main.get_command(cli_app))
    return found


COMMANDS = _commands()
IDS = [" ".join(("multibank", *path)) for path, _ in COMMANDS]


def _help(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(cli_app, [*path, "--help"])
    assert result.exit_code == 0, (result.exit_code, result.output, result.exception)
    return ANSI.sub("", result.output)


def test_the_walk_finds_every_command():
    found = {" ".join(path) for path, _ in COMMANDS}
    assert {
        "",
        "serve",
        "db",
        "db upgrade",
        "programme",
        "programme create",
        "programme show",
        "programme list",
        "programme movement-fee",
        "ledger",
        "ledger verify",
        "webhooks",
        "webhooks listen",
        "webhooks deliver",
        "sandbox",
        "sandbox seed",
    } <= found


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=IDS)
def test_help_has_no_type_placeholders_nor_decision_references(path, command):
    out = _help(path)
    assert out.strip()
    assert "Usage:" in out
    for placeholder in PLACEHOLDERS:
        assert placeholder not in out, f"{placeholder!r} in the help of {path}:\n{out}"
    assert not DECISION.search(out), f"a decision reference in the help of {path}:\n{out}"


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=IDS)
def test_help_names_and_explains_every_option(path, command):
    out = _help(path)
    ctx = command.make_context("multibank", [], resilient_parsing=True)
    params = [p for p in command.get_params(ctx) if not getattr(p, "hidden", False)]
    assert any("--help" in p.opts for p in params)
    for param in params:
        # An option by its long name, an argument by its metavar (or name).
        names = [o for o in param.opts if o.startswith("--")] or [param.metavar or param.name]
        for name in names:
            assert name in out, f"{name} missing from the help of {path}:\n{out}"
        assert (getattr(param, "help", None) or "").strip(), f"{names} of {path} has no help"
        assert not DECISION.search(param.help)
        if param.param_type_name == "option" and not param.is_flag:
            # A value option says what value it takes, in capitals (NAME, SECONDS, URL...).
            assert param.metavar and param.metavar.isupper(), f"{names} of {path}: no metavar"


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=IDS)
def test_the_summary_of_each_command_is_one_line(path, command):
    """A group lists each command by the first paragraph of its help: one line, so the listing
    does not break in the middle of a sentence."""
    assert command.help and command.help.strip(), f"{path} has no help"
    summary = inspect.cleandoc(command.help).split("\n\n")[0]
    assert "\n" not in summary, f"the summary of {path} spans lines: {summary!r}"
    assert not DECISION.search(command.help)


def _process_help(path: tuple[str, ...]) -> str:
    """`multibank ... --help` as a process of its own, the way an operator runs it."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "COLUMNS": "120", "NO_COLOR": "1", "TERM": "dumb"}
    done = subprocess.run(
        [sys.executable, "-m", "multibank", *path, "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return ANSI.sub("", done.stdout)


GROUPS = [(path, command) for path, command in COMMANDS if getattr(command, "commands", None)]


@pytest.mark.parametrize(
    ("path", "command"), GROUPS, ids=[" ".join(("multibank", *p)) for p, _ in GROUPS]
)
def test_each_group_help_lists_every_command_it_has(path, command):
    out = _process_help(path)
    listed = {
        line.split()[1]
        for line in out.splitlines()
        if line.startswith("│ ") and len(line.split()) > 1
    }
    assert set(command.commands) <= listed, out


def test_help_loads_none_of_the_server():
    """`multibank --help` imports the command-line app alone: the server's modules (the FastAPI
    app, the models, the database drivers, uvicorn) load when a command runs, so no help waits
    for them."""
    import subprocess
    import sys

    probe = (
        "import sys, multibank.cli\n"
        "heavy = ('sqlalchemy', 'fastapi', 'starlette', 'uvicorn', 'alembic', 'pydantic',\n"
        "         'pydantic_settings', 'httpx', 'multibank.app', 'multibank.models')\n"
        "print(' '.join(sorted(m for m in heavy if m in sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"imported by `import multibank.cli`: {done.stdout}"


def test_loading_the_server_leaves_the_collector_on_whatever_happens() -> None:
    """The cyclic collector is off only while the server's modules load (decision 0068): on
    again afterwards, even when loading fails, with what was loaded kept out of its scans."""
    import gc

    from multibank.cli import loading_the_server

    frozen = gc.get_freeze_count()
    with loading_the_server():
        assert not gc.isenabled()
        kept = [[n] for n in range(1000)]
    assert gc.isenabled() and gc.get_freeze_count() >= frozen + len(kept)
    with pytest.raises(ImportError), loading_the_server():
        import multibank_no_such_module  # type: ignore[import-not-found]  # noqa: F401
    assert gc.isenabled()
    gc.unfreeze()

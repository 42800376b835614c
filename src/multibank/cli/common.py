"""What the `multibank` command's groups share: the help's classes (no Python types shown), the
settings and the database a command works on, its one-line refusals and exit codes, the `default`
programme, and where a server answers."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from multibank.kernel.clock import Clock

# The server's modules are imported inside the functions that use them, never here: see
# `multibank.cli`.
if TYPE_CHECKING:
    from multibank.kernel.db import Database
    from multibank.programmes.schemas import ProgrammeDescription
    from multibank.settings import Settings


T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


# Help for operators. Typer shows each parameter's Python type in the options table (`<bool>`,
# `<str>`, `<int range>`); here a flag shows nothing, an option the `metavar` it declares (NAME,
# SECONDS, URL...) and an argument its name alone. tests/test_cli_help.py checks every command.


class NamedArgument(TyperArgument):
    """An argument shown by its metavar alone, without the Python type beside it."""

    def display_type_rich(self, ctx: Any) -> str | None:
        return None


@contextlib.contextmanager
def loading_the_server() -> Iterator[None]:
    """The server's modules load in one go (most of a command's CPU): nothing they make is
    garbage, so the cyclic collector is off meanwhile instead of scanning them again and again,
    and what they made is then left out of its later scans (`gc.freeze`)."""
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


def named(argument: TyperArgument) -> NamedArgument:
    """`argument` (as typer builds it from a command's signature) made a `NamedArgument`, from
    the same constructor arguments."""
    return NamedArgument(
        param_decls=[argument.name or ""],
        type_descriptor=argument.type_descriptor,
        required=argument.required,
        nargs=argument.nargs,
        show_default=argument.show_default,
        show_choices=argument.show_choices,
        show_envvar=argument.show_envvar,
        help=argument.help,
        hidden=argument.hidden,
        default=argument.default,
        callback=argument.callback,
        metavar=argument.metavar,
        expose_value=argument.expose_value,
        is_eager=argument.is_eager,
        envvar=argument.envvar if isinstance(argument.envvar, str | None) else [*argument.envvar],
        min=argument.min,
        max=argument.max,
        rich_help_panel=argument.rich_help_panel,
    )


def _operator_params(params: list[Any]) -> list[Any]:
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""  # a flag takes no value: nothing to show
    return params


class OperatorGroup(TyperGroup):
    """A command group whose help shows no Python types."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _operator_params(super().get_params(ctx))


class OperatorCommand(TyperCommand):
    """A command whose help shows no Python types: its arguments are `NamedArgument`s."""

    def __init__(self, name: str | None, **options: Any) -> None:
        params = options.get("params")
        if params:
            options["params"] = [named(p) if type(p) is TyperArgument else p for p in params]
        super().__init__(name, **options)

    def get_params(self, ctx: Any) -> list[Any]:
        return _operator_params(super().get_params(ctx))


class OperatorApp(typer.Typer):
    """A typer app whose groups and commands are `OperatorGroup`s and `OperatorCommand`s."""

    def __init__(self, **options: Any) -> None:
        options.setdefault("cls", OperatorGroup)
        super().__init__(**options)

    def command(
        self, name: str | None = None, *, cls: type[TyperCommand] | None = None, **options: Any
    ) -> Callable[[F], F]:
        return super().command(name, cls=cls or OperatorCommand, **options)


DEFAULT_PROGRAMME = "default"  # the sandbox programme `serve` creates on its first start


# Exit codes: 0 done; 1 the operation was refused (a name not found, a rule broken) or, for
# `ledger verify`, the ledger is broken; 2 the command cannot start (settings, database, port) or
# was asked for something that does not exist where 1 already means something else.
CANNOT_START = 2


def load_settings() -> Settings:
    """The settings, or one line saying which are wrong (and never their values: secrets)."""
    from pydantic import ValidationError

    from multibank.settings import get_settings

    try:
        return get_settings()
    except ValidationError as exc:
        problems = []
        for error in exc.errors(include_url=False, include_input=False):
            cause = error.get("ctx", {}).get("error")
            said = str(cause) if isinstance(cause, ValueError) else error["msg"]
            names = "_".join(str(part).upper() for part in error["loc"])
            problems.append(f"MULTIBANK_{names}: {said}" if names else said)
        fail(f"invalid settings: {'; '.join(problems)}", CANNOT_START)


def database_said(settings: Settings) -> tuple[str, str | None]:
    """How the database is named to the operator: the SQLite file's absolute path or the
    PostgreSQL URL without its password, with its kind and where it was set; and the SQLite
    file's path (None for PostgreSQL or an in-memory database)."""
    from sqlalchemy.engine import make_url

    url = make_url(settings.database_url)
    origin = "default" if settings.database_is_default else "MULTIBANK_DATABASE_URL"
    if url.get_backend_name() != "sqlite":
        return f"{url.render_as_string(hide_password=True)} (PostgreSQL, {origin})", None
    path = url.database or ""
    if not path or path == ":memory:":
        return f"{settings.database_url} (SQLite in memory, {origin})", None
    return f"{os.path.abspath(path)} (SQLite, {origin})", path


def run(
    work: Callable[[Database], Awaitable[T]],
    settings: Settings | None = None,
    creates: bool = False,
    wait_seconds: float = 0,
    again: bool = False,
) -> T:
    """Runs `work` on the configured database, first naming it on stderr (`database: …`).
    Unless the command `creates` the schema (`db upgrade`, `serve`), a missing, unreachable or
    unmigrated database is said in one line and exits 2, and nothing is created (a SQLite path
    is not even touched). A SQLite file that `creates` makes is said as it is made; a
    PostgreSQL server that cannot be reached yet is waited for up to `wait_seconds`. A command
    that opens the database `again` (to record what it did) does not name it twice."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import SQLAlchemyError

    from multibank.kernel.db import Database
    from multibank.kernel.migrate import current_revision, head_revision

    settings = settings or load_settings()
    url = make_url(settings.database_url)
    where = url.render_as_string(hide_password=True)
    said, path = database_said(settings)
    if path is not None:
        if not creates and not Path(path).exists():
            fail(
                f"no database at {path}: run `multibank db upgrade` (or `multibank serve`)",
                CANNOT_START,
            )
        if creates and not Path(path).exists():
            said += ": none there yet, creating it"
            if settings.database_is_default:
                # The user's data directory may not exist yet; a folder named in
                # MULTIBANK_DATABASE_URL is the operator's to make (a typo must not be made).
                Path(path).parent.mkdir(parents=True, exist_ok=True)
        if creates:
            # Opened here first, on this thread: a file that cannot be opened is said at once,
            # before aiosqlite's connection thread would report it to an event loop that the
            # failure is closing.
            try:
                sqlite3.connect(path).close()
            except sqlite3.Error as exc:
                fail(f"cannot use the database at {where}: {exc}", CANNOT_START)

    async def main() -> T:
        db = Database(settings.database_url, settings.database_echo)
        try:
            if creates:
                await _reachable(db, wait_seconds)
            else:
                revision = await current_revision(db)
                if revision is None:
                    fail(
                        f"the database at {where} is not migrated: run `multibank db upgrade`",
                        CANNOT_START,
                    )
                elif revision != head_revision():
                    fail(
                        f"the database at {where} is at {revision}: run `multibank db upgrade`",
                        CANNOT_START,
                    )
            if not again:
                typer.echo(f"database: {said}", err=True)
            return await work(db)
        finally:
            await db.dispose()

    try:
        return asyncio.run(main())
    except (OSError, SQLAlchemyError) as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0][:200]
        fail(f"cannot use the database at {where}: {reason}", CANNOT_START)


def fail(message: str, code: int = 1) -> NoReturn:
    """Says `message` on stderr, in one line, and exits with `code` (see the exit codes above)."""
    typer.echo(message, err=True)
    raise typer.Exit(code)


async def ensure_default_programme(db: Database) -> tuple[ProgrammeDescription, bool]:
    """The `default` sandbox programme exists after the first start; returns it and whether it
    was created now. Several processes may start at once: the unique name settles the race."""
    from multibank.programmes import repository, service
    from multibank.programmes.schemas import ProgrammeCreate

    async with db.transaction() as session:
        existing = await repository.get_programme_by_name(session, DEFAULT_PROGRAMME)
        if existing is not None:
            return await service.describe(session, existing), False
    try:
        async with db.transaction() as session:
            programme, key = await service.create_programme(
                session, Clock(), ProgrammeCreate(name=DEFAULT_PROGRAMME)
            )
            return await service.describe(session, programme, api_key=key), True
    except Exception:
        async with db.transaction() as session:
            existing = await repository.get_programme_by_name(session, DEFAULT_PROGRAMME)
            if existing is None:
                raise
            return await service.describe(session, existing), False


# SQLSTATEs of a PostgreSQL server that cannot take a connection now but may soon: starting
# up, shutting down or in recovery (57P03), every connection slot taken (53300), and class 08,
# the connection failing on the way. Any other answer (3D000 no such database, 28P01 wrong
# password, 28000 no such role...) will be the same in a minute.
_NOT_YET = ("57P03", "53300", "08")


def _worth_waiting(exc: BaseException) -> bool:
    """Whether the database may answer later: its server is unreachable (refused, no route, a
    name not resolved yet: an OSError) or says it cannot take a connection now."""
    if isinstance(exc, OSError):
        return True
    sqlstate = getattr(getattr(exc, "orig", None), "sqlstate", None)
    return isinstance(sqlstate, str) and sqlstate.startswith(_NOT_YET)


async def _reachable(db: Database, within: float) -> None:
    """Waits up to `within` seconds for a PostgreSQL server that cannot be reached yet (it may be
    starting with us), saying so once; then, or at once for any other error, the error stands.
    SQLite has no server to wait for."""
    from sqlalchemy.exc import SQLAlchemyError

    deadline = time.monotonic() + within
    said = False
    while True:
        try:
            await db.ping()
            return
        except (OSError, SQLAlchemyError) as exc:
            if db.is_sqlite or not _worth_waiting(exc) or time.monotonic() >= deadline:
                raise
            if not said:
                reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0][:200]
                typer.echo(f"waiting up to {within:g} s for the database: {reason}", err=True)
                said = True
            await asyncio.sleep(1)


def base_url_lines(base: str) -> list[str]:
    """Where a server at `base` answers: `serve` prints these, `info` too."""
    return [
        f"  start here:      {base}/ (API key, quick start)  portal: {base}/portal/",
        f"  3.29.1 (latest): {base}/multi        docs: {base}/multi/docs",
        f"  3.29.1:          {base}/3.29.1/multi docs: {base}/3.29.1/multi/docs",
        f"  3.1.0:           {base}/3.1.0/multi  docs: {base}/3.1.0/multi/docs",
        f"  3.63.4 (partial): {base}/3.63.4/multi docs: {base}/3.63.4/multi/docs",
        f"  simulator:       {base}/simulate/api  operator API: {base}/portal/api",
    ]


ADMIN_TOKEN_FROM_ENV = "from MULTIBANK_ADMIN_TOKEN"
ADMIN_TOKEN_STORED = (
    "generated on first start, kept in the database: `multibank admin-token` shows it"
)


def admin_token_source(settings: Settings, generated_now: str | None = None) -> str:
    """Where the server's admin token comes from (decision 0067); a token generated just now is
    shown, since the operator has no other way to learn it yet."""
    if settings.admin_token:
        return ADMIN_TOKEN_FROM_ENV
    if generated_now:
        return f"{generated_now} (generated now; `multibank admin-token` shows it again)"
    return ADMIN_TOKEN_STORED

"""`multibank programme`: programmes (tenants), their fees, and the developer loop's export,
import and reset of a sandbox programme."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from multibank.cli.common import OperatorApp, fail, load_settings, run
from multibank.kernel.clock import Clock
from multibank.kernel.errors import Conflict, NotFound

if TYPE_CHECKING:
    from multibank.kernel.db import Database
    from multibank.programmes.schemas import ProgrammeDescription


programme_app = OperatorApp(
    help="Programmes (tenants): create, show, list, set payment and card fees."
)
PROGRAMME_JSON_HELP = (
    "Print the programme as JSON (id, API key, profiles, currencies, fee types, payment fees, "
    "card fees)."
)


# Over 80 lines: typer reads the command's options, with their help, from its signature.
@programme_app.command("create")
def programme_create(
    name: Annotated[
        str,
        typer.Option(
            "--name",
            metavar="NAME",
            help="Unique programme name (letters, digits, dots, dashes, underscores).",
        ),
    ],
    live: Annotated[
        bool,
        typer.Option(
            "--live",
            help="Live mode: random one-time codes that are sent out, and an API key shown only "
            "now (default: sandbox, where every code is 123456 and nothing is sent).",
        ),
    ] = False,
    step_up_required: Annotated[
        bool,
        typer.Option(
            "--step-up-required",
            help="Sessions must step up with a one-time code before using accounts and statements.",
        ),
    ] = False,
    failed_login_limit: Annotated[
        int,
        typer.Option(
            "--failed-login-limit",
            min=1,
            metavar="N",
            help="Wrong passwords in a row that lock a user out.",
        ),
    ] = 5,
    iban_allocation_delay: Annotated[
        int,
        typer.Option(
            "--iban-allocation-delay",
            min=0,
            metavar="SECONDS",
            help="How long an account waits for the IBAN it asked for.",
        ),
    ] = 2,
    webhook_url: Annotated[
        str | None,
        typer.Option(
            "--webhook-url",
            metavar="URL",
            help="Where the programme's webhook events go (each to URL + its path).",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help=PROGRAMME_JSON_HELP)] = False,
) -> None:
    """Create a programme with its profiles, the ADMIN_FEE fee type and a first API key."""
    from pydantic import ValidationError

    from multibank.audit import service as audit
    from multibank.kernel.node_lease import NodeKeeper
    from multibank.programmes import service
    from multibank.programmes.schemas import ProgrammeCreate

    try:
        data = ProgrammeCreate(
            name=name,
            mode="live" if live else "sandbox",
            stepUpRequired=step_up_required,
            failedLoginLimit=failed_login_limit,
            ibanAllocationDelaySeconds=iban_allocation_delay,
            webhookUrl=webhook_url,
        )
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        fail(f"cannot create programme {name!r}: {problems}")
        return

    async def work(db: Database) -> ProgrammeDescription:
        nodes = NodeKeeper(db, Clock())
        await nodes.start(renew_in_background=False)
        try:
            async with db.transaction() as session:
                programme, key = await service.create_programme(
                    session, Clock(), data, load_settings().webhooks_allow_private
                )
                made = audit.Target("programme", str(programme.id))
                at = Clock().system_ms()
                await audit.record_change(
                    session, at, audit.CLI, "programme.create", programme.id, {}, made
                )
                return await service.describe(session, programme, api_key=key)
        finally:
            await nodes.stop()

    try:
        description = run(work)
    except Conflict as exc:
        reason = f"{exc.error_code} ({exc.message})" if exc.message else exc.error_code
        fail(f"cannot create programme {name!r}: {reason}")
        return
    _print_description(description, as_json)


@programme_app.command("show")
def programme_show(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The programme's name.")],
    as_json: Annotated[bool, typer.Option("--json", help=PROGRAMME_JSON_HELP)] = False,
) -> None:
    """Show a programme: id, API key (sandbox only), profiles, currencies and fee types."""
    from multibank.programmes import service

    async def work(db: Database) -> ProgrammeDescription:
        async with db.transaction() as session:
            programme = await service.require_programme_by_name(session, name)
            return await service.describe(session, programme)

    try:
        description = run(work)
    except NotFound as exc:
        fail(exc.message)
        return
    _print_description(description, as_json)


@programme_app.command("list")
def programme_list() -> None:
    """One line per programme: id, name, mode."""
    from multibank.programmes import repository

    async def work(db: Database) -> list[tuple[int, str, str]]:
        async with db.transaction() as session:
            return [(p.id, p.name, p.mode) for p in await repository.list_programmes(session)]

    for pid, pname, mode in run(work):
        typer.echo(f"{pid}\t{pname}\t{mode}")


@programme_app.command("movement-fee")
def programme_movement_fee(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The programme's name.")],
    payment: Annotated[
        str,
        typer.Option(
            "--payment",
            metavar="KIND",
            help="transfers, sends or outgoingWireTransfers (outgoing wire transfers).",
        ),
    ],
    currency: Annotated[
        str, typer.Option("--currency", metavar="CURRENCY", help="ISO-4217 code, e.g. EUR.")
    ],
    amount: Annotated[
        int,
        typer.Option(
            "--amount", min=0, metavar="MINOR_UNITS", help="The fee, in minor units (cents)."
        ),
    ],
) -> None:
    """Set the fee of one kind of payment in one currency.

    The fee comes on top of the payment's amount: the source pays it, and it goes to the
    programme's revenue. Prints the programme's payment fees."""
    from pydantic import ValidationError

    from multibank.audit import service as audit
    from multibank.programmes import service
    from multibank.programmes.schemas import ProfileUpdate

    try:
        fees = ProfileUpdate(fees={currency: amount}).fees or {}
    except ValidationError as exc:
        problems = "; ".join(e["msg"] for e in exc.errors())
        fail(f"cannot set the fee: {problems}")
        return

    async def work(db: Database) -> ProgrammeDescription:
        async with db.transaction() as session:
            programme = await service.require_programme_by_name(session, name)
            before = await audit.snapshot(session, programme.id)
            for code, value in fees.items():
                await service.set_movement_fee(session, programme, payment, code, value)
            at = Clock().system_ms()
            await audit.record_change(
                session, at, audit.CLI, "movement_fee.set", programme.id, before
            )
            return await service.describe(session, programme)

    try:
        description = run(work)
    except NotFound as exc:
        fail(exc.message)
        return
    except Conflict as exc:
        fail(f"cannot set the fee: {exc.error_code} ({currency} is not a currency of {name!r})")
        return
    typer.echo(json.dumps(description.movementFees.model_dump()))


CARD_FEE_KINDS = ("purchase", "refund", "atmWithdrawal")


def _card_fee_kind(value: str) -> str:
    if value not in CARD_FEE_KINDS:
        raise typer.BadParameter(f"no card fee {value!r}: one of {', '.join(CARD_FEE_KINDS)}")
    return value


@programme_app.command("card-fee")
def programme_card_fee(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The programme's name.")],
    fee: Annotated[
        str,
        typer.Option(
            "--fee",
            metavar="KIND",
            callback=_card_fee_kind,
            help="purchase, refund or atmWithdrawal (ATM cash withdrawal).",
        ),
    ],
    currency: Annotated[
        str, typer.Option("--currency", metavar="CURRENCY", help="ISO-4217 code, e.g. EUR.")
    ],
    amount: Annotated[
        int,
        typer.Option(
            "--amount", min=0, metavar="MINOR_UNITS", help="The fee, in minor units (cents)."
        ),
    ],
) -> None:
    """Set what one kind of card payment costs the cardholder in one currency.

    Charged when the payment settles, and never more than the card's balance leaves. Prints the
    programme's card fees."""
    from pydantic import ValidationError

    from multibank.audit import service as audit
    from multibank.programmes import service
    from multibank.programmes.schemas import CardFeeWrite

    try:
        changes = CardFeeWrite.model_validate({fee: {currency: amount}})
    except ValidationError as exc:
        problems = "; ".join(e["msg"] for e in exc.errors())
        raise typer.BadParameter(problems, param_hint="'--currency'/'--amount'") from None

    async def work(db: Database) -> dict[str, Any]:
        async with db.transaction() as session:
            programme = await service.require_programme_by_name(session, name)
            before = await audit.snapshot(session, programme.id)
            fees = await service.set_card_fees(
                session, programme, changes.model_dump(exclude_none=True)
            )
            at = Clock().system_ms()
            await audit.record_change(session, at, audit.CLI, "card_fee.set", programme.id, before)
            return fees.model_dump()

    try:
        fees = run(work)
    except NotFound as exc:
        fail(exc.message)
        return
    except Conflict as exc:
        fail(
            f"cannot set the card fee: {exc.error_code} ({currency} is not a currency of {name!r})"
        )
        return
    typer.echo(json.dumps(fees))


def _print_description(description: ProgrammeDescription, as_json: bool) -> None:
    data = description.model_dump()
    if as_json:
        typer.echo(json.dumps(data))
        return
    typer.echo(f"programme {data['programmeId']}")
    typer.echo(f"  api-key: {data['apiKey'] or '(not shown)'}")
    for kind, pid in data["profiles"].items():
        typer.echo(f"  profile {kind}: {pid}")
    typer.echo(f"  currencies: {', '.join(data['currencies'])}")
    typer.echo(f"  fee types: {', '.join(data['feeTypes'])}")
    for kind, fees in data["movementFees"].items():
        listed = ", ".join(f"{c} {amount}" for c, amount in fees.items())
        typer.echo(f"  {kind} fee (minor units): {listed}")
    for kind, fees in data["cardFees"].items():
        listed = ", ".join(f"{c} {amount}" for c, amount in fees.items())
        typer.echo(f"  card {kind} fee (minor units): {listed}")


# The developer loop (issue 35, decision 0051): each command's work is in `multibank.devloop`,
# imported when the command runs.


@programme_app.command("export")
def programme_export(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The sandbox programme's name.")],
    out: Annotated[
        Path | None,
        typer.Option("--out", metavar="FILE", help="Write to FILE instead of standard output."),
    ] = None,
    with_webhook_url: Annotated[
        bool,
        typer.Option(
            "--with-webhook-url",
            help="Include the programme's webhook URL (left out by default: it may name your "
            "machine or a secret path).",
        ),
    ] = False,
) -> None:
    """Write a sandbox programme's whole state as JSON, to share it as a fixture.

    Settings, profiles, fee types, customers, users (password hashes as stored), accounts,
    cards (data as stored, sealed), the ledger and payments; no API key, and the webhook URL
    only with --with-webhook-url. Every id is a JSON string, so tools such as jq keep it whole."""
    from multibank.devloop.transfer import TransferError, dumps, export_programme

    try:
        document = run(lambda db: export_programme(db, name, with_webhook_url))
    except NotFound as exc:
        fail(exc.message)
        return
    except TransferError as exc:
        fail(f"cannot export programme {name!r}: {exc}")
        return
    text_ = dumps(document)
    if out is None:
        typer.echo(text_)
        return
    try:
        out.write_text(text_ + "\n", encoding="utf-8")
    except OSError as exc:
        fail(f"cannot write {out}: {exc.strerror or exc}")


@programme_app.command("import")
def programme_import(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="A `programme export` file.")],
    name: Annotated[
        str, typer.Option("--name", metavar="NAME", help="The new sandbox programme's name.")
    ],
    as_json: Annotated[bool, typer.Option("--json", help=PROGRAMME_JSON_HELP)] = False,
) -> None:
    """Create a new sandbox programme from a `programme export` file, in one transaction.

    Every id is new (references kept consistent), and so are IBANs and the API key; the
    ledger's balances and postings are the file's."""
    from pydantic import ValidationError

    from multibank.audit import service as audit
    from multibank.devloop.transfer import TransferError, import_programme
    from multibank.programmes import service

    settings = load_settings()

    async def work(db: Database) -> ProgrammeDescription:
        # Read once the database is known to be there, as every command checks it first.
        try:
            document = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise TransferError(f"unreadable: {getattr(exc, 'strerror', None) or exc}") from None
        made = await import_programme(db, settings, document, name)
        async with db.transaction() as session:
            found = await service.require_programme(session, made.programme_id)
            target = audit.Target("programme", str(found.id))
            await audit.record_change(
                session, Clock().system_ms(), audit.CLI, "programme.import", found.id, {}, target
            )
            return await service.describe(session, found, api_key=made.api_key)

    try:
        description = run(work, settings)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        fail(f"cannot import as {name!r}: {problems}")
        return
    except (TransferError, Conflict) as exc:
        reason = exc.error_code if isinstance(exc, Conflict) else str(exc)
        fail(f"cannot import {file} as {name!r}: {reason}")
        return
    _print_description(description, as_json)


@programme_app.command("reset")
def programme_reset(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The sandbox programme's name.")],
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
) -> None:
    """Empty a sandbox programme: no customers, accounts, cards or money left.

    Keeps its name, API keys, settings, profiles (and their ids), fee types and webhook URL.
    Its programme id changes, so portal and operator-API addresses with the old id stop
    answering: the ledger is append-only and every posting names its programme, so a
    programme that kept its id would keep its old money. The old data stays in the database,
    archived and shown nowhere."""
    from multibank.audit import service as audit
    from multibank.devloop.reset import ResetError, reset

    if not yes and not typer.confirm(
        f"Reset programme {name!r}: every customer, account, card and payment of it goes?"
    ):
        fail("not reset")
    try:
        done = run(lambda db: reset(db, name))
        note = f"was programme {done.old_id}, archived as {done.archived_as}"
        target = audit.Target("programme", str(done.new_id))
        at = Clock().system_ms()
        run(
            lambda db: audit.record_cli(db, at, "programme.reset", name, None, target, note),
            again=True,
        )
    except NotFound as exc:
        fail(exc.message)
        return
    except ResetError as exc:
        fail(f"cannot reset programme {name!r}: {exc}")
        return
    typer.echo(f"programme {name} reset: id {done.new_id} (was {done.old_id}, archived)")
    typer.echo(
        f"  the id changed (the ledger never forgets the old one's money): portal and operator "
        f"API addresses now use {done.new_id}; the API key and profile ids are the same"
    )

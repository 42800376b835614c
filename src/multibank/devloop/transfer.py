"""`multibank programme export NAME` and `multibank programme import FILE`: a sandbox
programme's whole state as one JSON document, so a team can share a fixture (decision 0051).

The document holds the programme's settings (its webhook URL only when asked for), and every
row of the programme in
`TABLES` (profiles, fee types, customers, users with their password hashes as stored, factors,
accounts, cards with their data as stored, sealed, and their authorisations, the ledger's
accounts, transactions and postings, payments, and the 3.63 line's batch challenges, trusted
beneficiaries and linked accounts with their verifications), each column as stored. API keys,
sessions, one-time codes and webhook events are not in it: an imported programme gets a new API
key.

An import writes a new sandbox programme in one transaction, under a new name and new ids:
every id of the document is mapped to a new one, wherever it appears (id columns, and ids inside
JSON values), so references stay consistent. Values the database wants unique across programmes
are made anew (IBANs, due-diligence references, card handles, the ledger's system keys), and
card data sealed to a card's id is sealed again to its new id: it must have been sealed by this
server's card-data key. Balances and postings are copied as they are, so `ledger verify` holds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Column, Table, insert, select
from sqlalchemy.exc import IntegrityError, StatementError

from multibank.accounts import iban as ibans
from multibank.cards.physical import PIN_LABEL, TOKEN_LABEL
from multibank.cards.service import new_handle
from multibank.kernel import secrets as server_secrets
from multibank.kernel.carddata import CardDataError, CardKeyring
from multibank.kernel.clock import Clock
from multibank.kernel.db import Base, Database
from multibank.kernel.ids import new_id
from multibank.kyc.provider import new_reference
from multibank.models import load_all
from multibank.programmes import service
from multibank.programmes.models import Programme
from multibank.programmes.schemas import ProgrammeCreate
from multibank.settings import Settings

FORMAT = "multibank.programme"
# 2: every id, and every integer column's value of the rows, is a JSON string, since a 64-bit
# integer does not survive common JSON tools (jq 1.6 rounds it); the webhook URL only when
# asked for.
# 1: the same with integers as numbers and the webhook URL always; still read (decision 0069).
VERSION = 2
READ_VERSIONS = (1, 2)
WEBHOOK_URL = "webhook_url"
DIGITS = re.compile(r"-?[0-9]{1,19}")
# In the order they are written: a row's references are written before it.
TABLES = (
    "profiles",
    "fee_types",
    "identities",
    "users",
    "auth_factors",
    "ledger_accounts",
    "managed_accounts",
    "ledger_transactions",
    "postings",
    "payments",
    "managed_cards",
    "card_movements",
    "card_authorisations",
    "card_data_tokens",
    "batch_challenges",
    "beneficiary_batches",
    "beneficiaries",
    "linked_accounts",
    "linked_account_runs",
    "linked_account_steps",
)
# Tables that came after documents of version 2 were first written: a document without them
# holds none of their rows (the 3.63 line's, issue 43).
LATER_TABLES = frozenset(
    {
        "batch_challenges",
        "beneficiary_batches",
        "beneficiaries",
        "linked_accounts",
        "linked_account_runs",
        "linked_account_steps",
    }
)
# The programme's own columns that are not its settings.
NOT_SETTINGS = ("id", "name", "mode", "created_at", "webhook_secret")
# Columns ending in `_id` that hold no id of ours: a caller's own reference.
NOT_IDS = frozenset({"external_id"})


class TransferError(Exception):
    """Why the export or import stopped, in one line."""


def _tables() -> dict[str, Table]:
    load_all()
    return {name: Base.metadata.tables[name] for name in TABLES}


def _int_columns(table: Table) -> frozenset[str]:
    out = set()
    for column in table.columns:
        try:
            if column.type.python_type is int:
                out.add(column.name)
        except NotImplementedError:
            pass
    return frozenset(out)


def _written(value: Any) -> Any:
    """An integer column's value as the document writes it: a string."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


async def export_programme(
    db: Database, name: str, with_webhook_url: bool = False
) -> dict[str, Any]:
    """The document of the sandbox programme `name`, its webhook URL only `with_webhook_url`
    (it may name a developer's own machine or a secret path); raises NotFound or
    TransferError."""
    tables = _tables()
    async with db.transaction() as session:
        programme = await service.require_programme_by_name(session, name)
        if programme.mode != "sandbox":
            raise TransferError(f"it is a {programme.mode} programme; only sandbox ones export")
        settings = {
            c.key: getattr(programme, c.key)
            for c in Programme.__table__.columns
            if c.key not in NOT_SETTINGS and (with_webhook_url or c.key != WEBHOOK_URL)
        }
        rows: dict[str, list[dict[str, Any]]] = {}
        for table_name, table in tables.items():
            keys = [c.name for c in table.primary_key.columns]
            stmt = (
                select(table)
                .where(table.c.programme_id == programme.id)
                .order_by(*(table.c[k] for k in keys))
            )
            numbers = _int_columns(table)
            rows[table_name] = [
                {k: _written(v) if k in numbers else v for k, v in r.items()}
                for r in (await session.execute(stmt)).mappings().all()
            ]
    return {
        "format": FORMAT,
        "version": VERSION,
        "programme": {"id": str(programme.id), "name": name, "settings": settings},
        "tables": rows,
    }


def dumps(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=1, sort_keys=True, ensure_ascii=False)


def _is_id_column(column: str) -> bool:
    return (column == "id" or column.endswith("_id")) and column not in NOT_IDS


def _mapper(ids: dict[int, int]) -> Callable[[Any], Any]:
    """Maps every id of the document found in a value (an int, a digit string, or inside a JSON
    list or object) to its new id; leaves anything else as it is."""

    def remap(value: Any) -> Any:
        if isinstance(value, bool):
            return value
        if isinstance(value, int):
            return ids.get(value, value)
        if isinstance(value, str) and value.isdigit() and len(value) <= 19:
            mapped = ids.get(int(value))
            return value if mapped is None else str(mapped)
        if isinstance(value, list):
            return [remap(v) for v in value]
        if isinstance(value, dict):
            return {k: remap(v) for k, v in value.items()}
        return value

    return remap


def _fits(column: Column[Any], value: Any) -> bool:
    """Whether `value` is of `column`'s type (SQLite would store nearly anything anywhere)."""
    if value is None:
        return bool(column.nullable)
    try:
        kind = column.type.python_type
    except NotImplementedError:
        return True
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is dict:  # JSON: an object or a list
        return isinstance(value, dict | list)
    return isinstance(value, kind)


def _read(value: Any) -> Any:
    """An integer column's value as a document may hold it: a number (version 1) or a string
    of digits (version 2); anything else is left for `_check` to refuse."""
    return int(value) if isinstance(value, str) and DIGITS.fullmatch(value) else value


def _as_read(document: Any, tables: dict[str, Table]) -> Any:
    """`document` with its integers as numbers and a settings' webhook URL (none when left
    out), whichever version wrote it; what is not a document's shape is left for `_check`."""
    if not isinstance(document, dict):
        return document
    programme, rows = document.get("programme"), document.get("tables")
    out = dict(document)
    if isinstance(programme, dict):
        programme = {**programme, "id": _read(programme.get("id"))}
        if isinstance(programme.get("settings"), dict):
            programme["settings"] = {WEBHOOK_URL: None, **programme["settings"]}
        out["programme"] = programme
    if isinstance(rows, dict):
        rows = {**{name: [] for name in LATER_TABLES}, **rows}
        for name, table in tables.items():
            listed = rows.get(name)
            if isinstance(listed, list):
                numbers = _int_columns(table)
                rows[name] = [
                    {k: _read(v) if k in numbers else v for k, v in r.items()}
                    if isinstance(r, dict)
                    else r
                    for r in listed
                ]
        out["tables"] = rows
    return out


def _check(document: Any, tables: dict[str, Table]) -> None:
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise TransferError(f"not a multibank programme export (no format {FORMAT!r})")
    if document.get("version") not in READ_VERSIONS:
        versions = ", ".join(map(str, READ_VERSIONS))
        raise TransferError(
            f"export version {document.get('version')!r} is not known here (only {versions})"
        )
    programme = document.get("programme")
    rows = document.get("tables")
    if not isinstance(programme, dict) or not isinstance(rows, dict):
        raise TransferError("the export has no programme or no tables")
    if not isinstance(programme.get("id"), int) or not isinstance(programme.get("settings"), dict):
        raise TransferError("the export's programme has no id or no settings")
    known = {c.key for c in Programme.__table__.columns} - set(NOT_SETTINGS)
    if set(programme["settings"]) != known:
        raise TransferError("the export's programme settings are not those of this version")
    for column in Base.metadata.tables["programmes"].columns:
        if column.key in known and not _fits(column, programme["settings"][column.key]):
            raise TransferError(f"the export's programme setting {column.key} is not valid")
    if set(rows) != set(TABLES):
        raise TransferError(f"the export's tables are not {', '.join(TABLES)}")
    for name, table in tables.items():
        columns = {c.name for c in table.columns}
        listed = rows[name]
        if not isinstance(listed, list) or any(
            not isinstance(r, dict) or set(r) != columns for r in listed
        ):
            raise TransferError(f"the rows of {name} do not have the columns of this version")
        for row in listed:
            wrong = next((c.name for c in table.columns if not _fits(c, row[c.name])), None)
            if wrong is not None:
                raise TransferError(f"a row of {name} has an invalid {wrong}")


@dataclass(frozen=True)
class Imported:
    programme_id: int
    api_key: str
    rows: int


async def import_programme(db: Database, settings: Settings, document: Any, name: str) -> Imported:
    """Writes the exported programme `document` as the new sandbox programme `name`, in one
    transaction; raises TransferError for a document it cannot take and Conflict for a name
    already used."""
    tables = _tables()
    document = _as_read(document, tables)
    _check(document, tables)
    old_pid: int = document["programme"]["id"]
    rows: dict[str, list[dict[str, Any]]] = document["tables"]
    clock = Clock()
    keys: CardKeyring | None = None
    if rows["managed_cards"] or rows["card_data_tokens"]:
        data_keys, verification_key = await server_secrets.card_keys(
            db, settings.card_data_key, settings.card_verification_key, clock.system_ms()
        )
        keys = CardKeyring(data_keys, verification_key)
    async with db.transaction() as session:
        programme, api_key = await service.create_programme(
            session, clock, ProgrammeCreate(name=name)
        )
        # The defaults create_programme made give way to the document's.
        for table_name in ("profiles", "fee_types"):
            table = tables[table_name]
            await session.execute(table.delete().where(table.c.programme_id == programme.id))
        for column, value in document["programme"]["settings"].items():
            setattr(programme, column, value)
        try:
            async with session.begin_nested():
                await session.flush()
        except StatementError as exc:
            raise TransferError(f"the programme's settings are refused: {_reason(exc)}") from None
        ids: dict[int, int] = {old_pid: programme.id}
        for table_name, table in tables.items():
            pk = [c.name for c in table.primary_key.columns]
            for row in rows[table_name]:
                if not all(isinstance(row[c], int) for c in pk):
                    raise TransferError(f"a row of {table_name} has no integer id")
                for column in pk:
                    if row[column] not in ids:
                        ids[row[column]] = new_id()
        remap = _mapper(ids)
        count = 0
        for table_name, table in tables.items():
            out = []
            for row in rows[table_name]:
                new = {
                    column: remap(value)
                    if _is_id_column(column) or isinstance(value, dict | list)
                    else value
                    for column, value in row.items()
                }
                await _renew_unique(session, table_name, row, new, old_pid, programme.id, keys)
                out.append(new)
            if out:
                try:
                    async with session.begin_nested():
                        await session.execute(insert(table), out)
                except (IntegrityError, StatementError) as exc:
                    raise TransferError(
                        f"the rows of {table_name} are refused: {_reason(exc)}"
                    ) from None
                count += len(out)
        return Imported(programme.id, api_key, count)


async def _renew_unique(
    session: Any,
    table_name: str,
    old: dict[str, Any],
    new: dict[str, Any],
    old_pid: int,
    new_pid: int,
    keys: CardKeyring | None,
) -> None:
    """Gives `new` the values unique across programmes anew, and seals card data again to its
    new id."""
    if table_name == "ledger_accounts" and new["system_key"]:
        prefix = f"{old_pid}:"
        if not str(new["system_key"]).startswith(prefix):
            raise TransferError(f"ledger account {old['id']} has a foreign system key")
        new["system_key"] = f"{new_pid}:{new['system_key'].removeprefix(prefix)}"
    elif table_name == "identities" and new["dd_reference"]:
        new["dd_reference"] = new_reference()
    elif table_name == "users" and new["kyc_reference"]:
        new["kyc_reference"] = new_reference()
    elif table_name == "managed_accounts" and new["iban"]:
        if not ibans.supported(new["currency"]):
            raise TransferError(f"account {old['id']} has an IBAN in {new['currency']}")
        allocation = await ibans.allocate(session, new["currency"])
        new.update(
            iban=allocation.iban,
            bic=allocation.bic,
            sort_code=allocation.sort_code,
            account_number=allocation.account_number,
        )
    elif table_name == "managed_cards":
        new["external_handle"] = new_handle()
        assert keys is not None
        for column, label in (("number_encrypted", ""), ("pin_encrypted", PIN_LABEL)):
            if new[column]:
                new[column] = _reseal(keys, new[column], old["id"], new["id"], label)
    elif table_name == "card_data_tokens":
        assert keys is not None
        new["value_encrypted"] = _reseal(
            keys, new["value_encrypted"], old["id"], new["id"], TOKEN_LABEL
        )


def _reason(exc: Exception) -> str:
    said = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return said[0][:200] if said else type(exc).__name__


def _reseal(keys: CardKeyring, stored: str, old_id: int, new_id_: int, label: str) -> str:
    try:
        return keys.encrypt(keys.decrypt(stored, old_id, label), new_id_, label)
    except CardDataError:
        raise TransferError(
            "its card data was sealed with another server's card-data key"
        ) from None

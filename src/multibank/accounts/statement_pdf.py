"""The statement as a PDF (`accept: application/pdf`): a title, the account, the period, a table
of the page's entries (date in UTC, type, description, amount, balance after) and page numbers.

Text uses the PDF core font Helvetica, which covers Latin-1 only: other characters (in a friendly
name or a sender's name) are shown as `?` rather than failing the statement.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from multibank.kernel.money import Money
from multibank.ledger.statements import Entry

_TYPES = {
    "INSTRUMENT_CREATE": "Account opened",
    "INSTRUMENT_BLOCK": "Account blocked",
    "INSTRUMENT_UNBLOCK": "Account unblocked",
    "INSTRUMENT_DELETE": "Account removed",
    "DEPOSIT": "Deposit",
    "CHARGE_FEE": "Fee",
    "TRANSFER": "Transfer",
    "SEND": "Send",
    "OUTGOING_WIRE_TRANSFER": "Wire transfer",
}
_COUNTERPARTS = (
    ("destinationInstrumentFriendlyName", "to"),
    ("sourceInstrumentFriendlyName", "from"),
    ("destinationIdentityName", "to"),
    ("sourceIdentityName", "from"),
    ("beneficiaryName", "to"),
)
COLUMNS = ("Date (UTC)", "Type", "Description", "Amount", "Balance after")
COLUMN_WIDTHS = (30, 36, 64, 30, 30)  # mm, 190 in all: A4 less 10 mm margins
COLUMN_ALIGN = ("L", "L", "L", "R", "R")
ROW_HEIGHT = 5.5  # mm


@dataclass(frozen=True)
class StatementHeading:
    account_id: int
    friendly_name: str
    currency: str
    from_ms: int | None
    to_ms: int | None
    generated_ms: int
    available: int | None  # None: a debit card's statement (the card holds no money)
    actual: int | None
    count: int
    offset: int
    ascending: bool
    instrument: str = "account"  # or "card": its balance after is the available one (D23)


def utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def period(from_ms: int | None, to_ms: int | None) -> str:
    if from_ms is None and to_ms is None:
        return "all"
    start = "the beginning" if from_ms is None else f"{utc(from_ms)} UTC"
    end = "now" if to_ms is None else f"{utc(to_ms)} UTC"
    return f"{start} to {end}"


def describe(entry: Entry) -> str:
    """A line a person reads: what happened, with the details that say from whom or why."""
    d = {k: str(v) for k, v in entry.details.items() if v not in (None, "")}
    if entry.type == "DEPOSIT":
        parts = ["Deposit"]
        if "sender" in d:
            parts.append(f"from {d['sender']}")
        text = " ".join(parts)
        return f"{text}: {d['reference']}" if "reference" in d else text
    if entry.type == "CHARGE_FEE":
        return f"Fee {d['chargeFeeType']}" if "chargeFeeType" in d else "Fee"
    if entry.type in ("TRANSFER", "SEND", "OUTGOING_WIRE_TRANSFER"):
        # The other side: a transfer's other account, a send's other identity, a wire
        # transfer's beneficiary.
        label = _TYPES[entry.type]
        for key, word in _COUNTERPARTS:
            if key in d:
                label = f"{label} {word} {d[key]}"
                break
        fee = Money(entry.fee, entry.currency).format()
        return f"{label}, fee {fee}" if entry.fee else label
    return _TYPES.get(entry.type, entry.type.replace("_", " ").capitalize())


_PUNCTUATION = str.maketrans(
    {
        "\u2013": "-",
        "\u2014": "-",
        "\u2018": "'",
        "\u2019": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u2026": "...",
    }
)


def latin1(text: str) -> str:
    return text.translate(_PUNCTUATION).encode("latin-1", "replace").decode("latin-1")


def render(heading: StatementHeading, entries: Sequence[Entry]) -> bytes:
    """The statement's PDF; fpdf2 is loaded on the first one (`statement_pdf_document`)."""
    from multibank.accounts.statement_pdf_document import render_document

    return render_document(heading, entries)

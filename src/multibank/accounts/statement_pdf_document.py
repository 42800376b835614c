"""The statement's PDF document (decision 0069): fpdf2 and what it loads (Pillow, fontTools)
take a few tenths of a second to import, so they are imported with this module, when the first
PDF is asked for, not by every process that imports `statement_pdf` (the server's routes, the
portal, `multibank webhooks trigger`)."""

from __future__ import annotations

from collections.abc import Sequence

from fpdf import FPDF
from fpdf.enums import XPos, YPos

from multibank.accounts.statement_pdf import (
    COLUMN_ALIGN,
    COLUMN_WIDTHS,
    COLUMNS,
    ROW_HEIGHT,
    StatementHeading,
    describe,
    latin1,
    period,
    utc,
)
from multibank.kernel.money import Money
from multibank.ledger.statements import CARD_STEPS, Entry


class _Document(FPDF):
    """A4 portrait; every page ends with the title and "Page i of n"; once the table has
    started, every new page begins with its heading row."""

    def __init__(self, title: str) -> None:
        super().__init__(orientation="P", unit="mm", format="A4")
        self.statement_title = title
        self.in_table = False
        self.set_margins(10, 12, 10)
        self.set_auto_page_break(auto=True, margin=16)
        self.alias_nb_pages()

    def header(self) -> None:
        if self.in_table:
            self.table_heading()

    def table_heading(self) -> None:
        self.set_font("Helvetica", "B", 8)
        self.set_fill_color(225, 230, 240)
        for title, width, align in zip(COLUMNS, COLUMN_WIDTHS, COLUMN_ALIGN, strict=True):
            self.cell(width, ROW_HEIGHT, title, align=align, fill=True)
        self.ln(ROW_HEIGHT)
        self.set_font("Helvetica", size=8)

    def row(self, values: Sequence[str]) -> None:
        """One line per entry (cells are single-line, much cheaper than wrapped table cells);
        a text too wide for its column is cut with "..."."""
        if self.get_y() + ROW_HEIGHT > self.page_break_trigger:
            self.add_page()
        for value, width, align in zip(values, COLUMN_WIDTHS, COLUMN_ALIGN, strict=True):
            self.cell(
                width,
                ROW_HEIGHT,
                self.fit(value, width - 2 * self.c_margin),
                align=align,
                border="B",
            )
        self.ln(ROW_HEIGHT)

    def fit(self, text: str, width: float) -> str:
        if self.get_string_width(text) <= width:
            return text
        lo, hi = 0, len(text)  # the longest prefix that fits with "..." (binary search)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.get_string_width(text[:mid] + "...") <= width:
                lo = mid
            else:
                hi = mid - 1
        return text[:lo].rstrip() + "..."

    def footer(self) -> None:
        self.set_y(-12)
        self.set_font("Helvetica", size=8)
        self.set_text_color(110)
        self.cell(0, 6, latin1(self.statement_title), align="L")
        self.set_x(self.l_margin)
        self.cell(0, 6, f"Page {self.page_no()} of {{nb}}", align="R")
        self.set_text_color(0)


def _after(h: StatementHeading, e: Entry) -> str:
    if not e.has_balances:
        return ""
    # A card's balance after an entry is its available one, as is a card step's (D23).
    after = e.available_after if h.instrument == "card" or e.type in CARD_STEPS else e.actual_after
    return Money(after, e.currency).format()


def render_document(heading: StatementHeading, entries: Sequence[Entry]) -> bytes:
    h = heading
    doc = _Document(f"Statement of {h.instrument} {h.account_id}")
    doc.set_title(f"Statement of {h.instrument} {h.account_id}")
    doc.set_author("multibank")
    doc.add_page()
    doc.set_font("Helvetica", "B", 16)
    doc.cell(0, 9, f"{h.instrument.capitalize()} statement", new_x=XPos.LMARGIN, new_y=YPos.NEXT)
    doc.ln(1)
    doc.set_font("Helvetica", size=10)
    first = h.offset + 1 if entries else 0
    balance_now = (
        "none held (debit card: its parent account's)"
        if h.actual is None or h.available is None
        else f"{Money(h.actual, h.currency).format()} actual, "
        f"{Money(h.available, h.currency).format()} available"
    )
    lines = (
        (h.instrument.capitalize(), str(h.account_id)),
        ("Name", h.friendly_name),
        ("Currency", h.currency),
        ("Period", period(h.from_ms, h.to_ms)),
        ("Balance now", balance_now),
        (
            "Entries",
            f"{first}-{h.offset + len(entries)} of {h.count}, "
            f"{'oldest' if h.ascending else 'newest'} first",
        ),
        ("Generated", f"{utc(h.generated_ms)} UTC"),
    )
    for label, value in lines:
        doc.set_font("Helvetica", "B", 10)
        doc.cell(30, 6, label)
        doc.set_font("Helvetica", size=10)
        doc.cell(0, 6, latin1(value), new_x=XPos.LMARGIN, new_y=YPos.NEXT)
    doc.ln(4)
    if not entries:
        doc.set_font("Helvetica", "I", 10)
        doc.cell(0, 6, "No entries in this period.", new_x=XPos.LMARGIN, new_y=YPos.NEXT)
        return bytes(doc.output())
    doc.set_draw_color(200)
    doc.table_heading()
    doc.in_table = True
    for e in entries:
        doc.row(
            (
                utc(e.timestamp),
                e.type,
                latin1(describe(e)),
                Money(e.amount, e.currency).format(),
                _after(h, e),
            )
        )
    return bytes(doc.output())

"""`scripts/screenshots.py` (issue 35): it runs on a fresh machine's tools (its own server on
SQLite, Debian's Chromium) and saves every page it names, the pages reached by a link included
(a statement, a payment's detail, a webhook delivery's detail), at both widths, each a real
image of the page rather than an error page."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [
    "programmes",
    "overview",
    "programme",
    "customers",
    "customer",
    "ledger",
    "inbox",
    "webhooks",
    "payments",
    "cards",
    "audit",
    "statement",
    "payment",
    "delivery",
]


def test_the_screenshots_cover_every_page_at_both_widths(tmp_path: Path) -> None:
    if os.environ.get("MULTIBANK_TEST_DB") == "postgres":
        pytest.skip("the script starts multibank on SQLite: the SQLite half runs this test")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MULTIBANK_")}
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "screenshots.py"), "--out", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for name in PAGES:
        for width in ("laptop", "phone"):
            png = tmp_path / f"{name}-{width}.png"
            assert png.exists(), f"{png.name} missing: {done.stdout}"
            # A PNG, of a page with content (an empty or one-line error page is a few KB).
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            assert png.stat().st_size > 8_000, (
                f"{png.name} is nearly empty"
            )  # every page answered 200

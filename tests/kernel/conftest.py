"""Fixtures of the kernel's tests."""

from __future__ import annotations

import pytest

from multibank.kernel.direct import Direct


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The driver's own statements (`Direct.run_sql`: BEGIN, SAVEPOINT, ...) as they are sent."""
    seen: list[str] = []
    real = Direct.run_sql

    def telling(self: Direct, sql: str) -> None:
        seen.append(sql)
        real(self, sql)

    monkeypatch.setattr(Direct, "run_sql", telling)
    return seen

"""Transactions that lost a race in the database: PostgreSQL broke a deadlock they were part of
(SQLSTATE 40P01) or could not serialise them (40001). Nothing they did was kept, and the same
work run again normally succeeds: a write request is run again a few times (api/routing.py),
then answers 503 with Retry-After (api/errors.py); a background step is left for the next round.

SQLite takes its write lock up front (BEGIN IMMEDIATE), so it has neither; a lock it waited for
too long ("database is locked") is a 503 already (`database_unavailable`)."""

from __future__ import annotations

import random

from sqlalchemy.exc import DBAPIError

DEADLOCK, SERIALIZATION = "40P01", "40001"
# A write request's runs in all: the first and this many more. A deadlock costs the run that
# loses it PostgreSQL's `deadlock_timeout` (1 s by default) before it is told.
ATTEMPTS = 3
RETRY_AFTER_SECONDS = 1


def sqlstate(error: BaseException) -> str | None:
    """The SQLSTATE of a database error raised through SQLAlchemy (the asyncpg adapter's errors
    carry it as `sqlstate`), or of the one it was raised from."""
    seen = 0
    current: BaseException | None = error
    while current is not None and seen < 4:
        if isinstance(current, DBAPIError):
            code = getattr(current.orig, "sqlstate", None)
            if isinstance(code, str):
                return code
        current = current.__cause__
        seen += 1
    return None


def lost_race(error: BaseException) -> bool:
    """The transaction was ended by a deadlock or a serialization failure: run it again."""
    return sqlstate(error) in (DEADLOCK, SERIALIZATION)


def pause(attempt: int) -> float:
    """Seconds to wait before run `attempt + 1` (from 1): a few milliseconds, more each time
    and jittered, so the transactions that met do not meet again in step."""
    return random.uniform(0.005, 0.025) * attempt

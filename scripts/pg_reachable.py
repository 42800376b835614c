"""Exit 0 when the PostgreSQL server named by argv[1] answers within five seconds."""

import asyncio
import sys

from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine


async def main(url: str) -> int:
    engine = create_async_engine(url, connect_args={"timeout": 5})
    try:
        async with engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
        return 0
    except Exception as exc:  # any failure means "not reachable"; the caller says so loudly
        print(f"PostgreSQL check failed: {exc!r}", file=sys.stderr)
        return 1
    finally:
        await engine.dispose()


sys.exit(asyncio.run(main(sys.argv[1])))

"""What a domain service needs to know about the request it serves."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession

from multibank.kernel import codes
from multibank.kernel.errors import Conflict
from multibank.programmes.models import Programme


@dataclass(frozen=True)
class Ctx:
    db: AsyncSession
    programme: Programme
    now: int  # the programme's clock, epoch ms

    @property
    def sandbox(self) -> bool:
        return self.programme.mode == "sandbox"

    async def issue_code(
        self, subject: str, purpose: str, ttl_ms: int = codes.DEFAULT_TTL_MS
    ) -> codes.Issued:
        """A one-time code of this programme's mode (`123456` in sandbox, D1)."""
        return await codes.issue(
            self.db,
            programme_id=self.programme.id,
            sandbox=self.sandbox,
            subject=subject,
            purpose=purpose,
            now_ms=self.now,
            ttl_ms=ttl_ms,
        )

    async def check_code(
        self,
        subject: str,
        purpose: str,
        code: str,
        refusal: str,
        *,
        expired: str | None = None,
        keep: bool = False,
    ) -> None:
        """Uses up (or with `keep`, only checks) the live code, else 409 `refusal` (`expired`
        for a code past its time, when the operation names one). A live code's wrong try is
        committed although the answer is a refusal (decision 2)."""
        try:
            await codes.consume(
                self.db,
                programme_id=self.programme.id,
                sandbox=self.sandbox,
                subject=subject,
                purpose=purpose,
                code=code,
                now_ms=self.now,
                keep=keep,
            )
        except codes.CodeExpired:
            if expired is None:
                raise Conflict(refusal).keeping_changes() from None
            raise Conflict(expired) from None
        except codes.CodeInvalid:
            raise Conflict(refusal).keeping_changes() from None

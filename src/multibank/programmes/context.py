"""What a domain service needs to know about the request it serves."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession

from multibank.programmes.models import Programme


@dataclass(frozen=True)
class Ctx:
    db: AsyncSession
    programme: Programme
    now: int  # the programme's clock, epoch ms

    @property
    def sandbox(self) -> bool:
        return self.programme.mode == "sandbox"

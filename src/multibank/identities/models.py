"""The identity table: one row per corporate or consumer."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Boolean, ForeignKey, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from multibank.kernel.db import ID, Base

CORPORATE = "CORPORATE"
CONSUMER = "CONSUMER"


class Identity(Base):
    __tablename__ = "identities"
    __table_args__ = (Index("ix_identities_programme_type", "programme_id", "type"),)

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=False)
    programme_id: Mapped[int] = mapped_column(ForeignKey("programmes.id"))
    type: Mapped[str] = mapped_column(String(10))  # CORPORATE | CONSUMER
    profile_id: Mapped[int] = mapped_column(ForeignKey("profiles.id"))
    tag: Mapped[str | None] = mapped_column(String(50), nullable=True)
    ip_address: Mapped[str] = mapped_column(String(45))
    accepted_terms: Mapped[bool] = mapped_column(Boolean)
    base_currency: Mapped[str | None] = mapped_column(String(3), nullable=True)
    fee_group: Mapped[str] = mapped_column(String(50), default="DEFAULT")
    industry: Mapped[str | None] = mapped_column(String(50), nullable=True)
    source_of_funds: Mapped[str | None] = mapped_column(String(60), nullable=True)
    source_of_funds_other: Mapped[str | None] = mapped_column(String(200), nullable=True)
    # Corporate only: the company as the wire `company` object (name, type, addresses, ...).
    company: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # Due diligence (KYB for corporates, KYC for consumers): KyiStatus values.
    dd_status: Mapped[str] = mapped_column(String(20), default="NOT_STARTED")
    dd_ongoing_status: Mapped[str] = mapped_column(String(20), default="NOT_STARTED")
    dd_level: Mapped[str | None] = mapped_column(String(20), nullable=True)
    dd_reference: Mapped[str | None] = mapped_column(String(30), nullable=True, unique=True)
    dd_permanently_rejected: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[int]

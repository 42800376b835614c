"""Enrolled factors of a user and the step-up challenges issued against them."""

from __future__ import annotations

from sqlalchemy import ForeignKey, Index, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from multibank.kernel.db import ID, Base


class AuthFactor(Base):
    __tablename__ = "auth_factors"
    __table_args__ = (UniqueConstraint("user_id", "channel"),)

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=False)
    programme_id: Mapped[int] = mapped_column(ForeignKey("programmes.id"))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    type: Mapped[str] = mapped_column(String(10))  # OTP | PUSH | BIOMETRIC (SCAChallengeType)
    channel: Mapped[str] = mapped_column(String(10))  # SMS | AUTHY | BIOMETRIC
    status: Mapped[str] = mapped_column(String(25))  # PENDING_VERIFICATION | ACTIVE | INACTIVE
    created_at: Mapped[int]
    updated_at: Mapped[int]


class ScaChallenge(Base):
    __tablename__ = "sca_challenges"
    __table_args__ = (Index("ix_sca_challenges_session", "session_id", "status"),)

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=False)
    programme_id: Mapped[int] = mapped_column(ForeignKey("programmes.id"))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    session_id: Mapped[int] = mapped_column(ForeignKey("auth_sessions.id"))
    channel: Mapped[str] = mapped_column(String(10))
    # PENDING | COMPLETED | DENIED | EXPIRED
    status: Mapped[str] = mapped_column(String(10))
    created_at: Mapped[int]
    expires_at: Mapped[int]
    settled_at: Mapped[int | None] = mapped_column(nullable=True)
    # A payment's push challenge (D13); none for a step-up.
    payment_id: Mapped[int | None] = mapped_column(nullable=True, index=True)

"""The user table: the root user of each identity and its authorised users."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Boolean, ForeignKey, Index, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from multibank.kernel.db import ID, Base

ROOT = "ROOT"
USER = "USER"


class User(Base):
    __tablename__ = "users"
    __table_args__ = (
        # One login per e-mail in a programme, so e-mail + password names exactly one user.
        UniqueConstraint("programme_id", "email_key"),
        Index("ix_users_identity", "identity_id", "role"),
    )

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=False)
    programme_id: Mapped[int] = mapped_column(ForeignKey("programmes.id"))
    identity_id: Mapped[int] = mapped_column(ForeignKey("identities.id"))
    identity_type: Mapped[str] = mapped_column(String(10))
    role: Mapped[str] = mapped_column(String(4))  # ROOT | USER
    name: Mapped[str] = mapped_column(String(100))
    surname: Mapped[str] = mapped_column(String(100))
    email: Mapped[str] = mapped_column(String(255))
    email_key: Mapped[str] = mapped_column(String(255))  # lower-cased e-mail, for uniqueness
    mobile_country_code: Mapped[str | None] = mapped_column(String(6), nullable=True)
    mobile_number: Mapped[str | None] = mapped_column(String(15), nullable=True)
    date_of_birth: Mapped[dict[str, int] | None] = mapped_column(JSON, nullable=True)
    company_position: Mapped[str | None] = mapped_column(String(30), nullable=True)
    occupation: Mapped[str | None] = mapped_column(String(50), nullable=True)
    address: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    nationality: Mapped[str | None] = mapped_column(String(2), nullable=True)
    place_of_birth: Mapped[str | None] = mapped_column(String(100), nullable=True)
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    email_verified: Mapped[bool] = mapped_column(Boolean, default=False)
    mobile_verified: Mapped[bool] = mapped_column(Boolean, default=False)
    # Argon2id hashes: the current password and up to four before it (none may be reused).
    password_hash: Mapped[str | None] = mapped_column(String(200), nullable=True)
    password_history: Mapped[list[str]] = mapped_column(JSON, default=list)
    password_expires_at: Mapped[int] = mapped_column(default=0)  # 0 = never
    failed_logins: Mapped[int] = mapped_column(Integer, default=0)
    locked_until: Mapped[int | None] = mapped_column(nullable=True)
    invite_state: Mapped[str] = mapped_column(String(10), default="NONE")  # NONE|SENT|CONSUMED
    # Authorised-user KYC (3.29.1 `POST /users/kyc`).
    kyc_status: Mapped[str] = mapped_column(String(20), default="NOT_STARTED")
    kyc_reference: Mapped[str | None] = mapped_column(String(30), nullable=True, unique=True)
    created_at: Mapped[int]

"""Every setting of the server, read once from MULTIBANK_* environment variables."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MULTIBANK_", extra="ignore")

    # `sandbox` lets secrets be generated on first start; `live` refuses to start without them.
    mode: Literal["sandbox", "live"] = "sandbox"
    database_url: str = Field(default_factory=lambda: f"sqlite+aiosqlite:///{Path('multibank.db')}")
    database_echo: bool = False
    admin_token: str | None = None
    # "kid1:secret1,kid2:secret2": the first signs, all verify (rotation).
    jwt_keys: str | None = None
    redis_url: str | None = None
    node_id: int | None = Field(default=None, ge=0, le=1023)

    session_idle_seconds: int = Field(default=300, ge=1)
    session_absolute_seconds: int = Field(default=12 * 3600, ge=1)
    idempotency_retention_hours: int = Field(default=24, ge=24)
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)

    argon2_memory_kib: int = Field(default=19 * 1024, ge=8)
    argon2_time_cost: int = Field(default=2, ge=1)
    argon2_parallelism: int = Field(default=1, ge=1)

    # limits-library strings; several windows may be joined with ';'.
    rate_limit_login: str = "20/minute;200/hour"
    rate_limit_code_send: str = "10/minute;50/hour"
    rate_limit_code_verify: str = "20/minute;200/hour"

    log_level: str = "INFO"
    log_json: bool = True

    @model_validator(mode="after")
    def _live_needs_secrets(self) -> Settings:
        if self.mode == "live":
            missing = [n for n in ("admin_token", "jwt_keys") if not getattr(self, n)]
            if missing:
                names = ", ".join(f"MULTIBANK_{n.upper()}" for n in missing)
                raise ValueError(f"live mode refuses to start without {names}")
        return self

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")


@lru_cache
def get_settings() -> Settings:
    return Settings()

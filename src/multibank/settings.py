"""Every setting of the server, read once from MULTIBANK_* environment variables."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from platformdirs import user_data_path
from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from multibank.kernel.carddata import parse_data_keys
from multibank.kernel.db import check_url
from multibank.kernel.tokens import TokenKeyring

# A live admin token is guessed only by brute force: at least 32 characters (decision 0038).
ADMIN_TOKEN_MIN_LIVE = 32
# What a live server never generates for itself: a sandbox keeps generated ones in its database,
# but live card data must be decryptable only with keys the operator holds (D29).
LIVE_SECRETS = ("admin_token", "jwt_keys", "card_data_key", "card_verification_key")


def default_database_path() -> Path:
    """The SQLite file used when MULTIBANK_DATABASE_URL is unset: in the user's data directory
    (`~/.local/share/multibank` on Linux, `~/Library/Application Support/multibank` on macOS,
    `%LOCALAPPDATA%\\multibank` on Windows), so `serve` and every command agree whatever folder
    each runs in (decision 0066)."""
    return user_data_path("multibank", appauthor=False) / "multibank.db"


def default_database_url() -> str:
    return f"sqlite+aiosqlite:///{default_database_path()}"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MULTIBANK_", extra="ignore")

    # `sandbox` lets secrets be generated on first start; `live` refuses to start without them.
    mode: Literal["sandbox", "live"] = "sandbox"
    database_url: str = Field(default_factory=default_database_url)
    database_echo: bool = False
    # PostgreSQL connections of each process (a fixed pool): the deployment needs processes x
    # this, plus a few for the CLI, within the server's max_connections (README).
    database_pool_size: int = Field(default=5, ge=1, le=100)
    # How long a request waits for a free connection before answering 503 (Retry-After).
    database_pool_timeout_seconds: float = Field(default=10, gt=0)
    # How long `serve` keeps trying to reach the database at start-up before giving up.
    database_startup_timeout_seconds: float = Field(default=60, ge=0)
    admin_token: str | None = None
    # "kid1:secret1,kid2:secret2": the first signs, all verify (rotation).
    jwt_keys: str | None = None
    # Card data (D20, D21): "kid1:secret1,kid2:secret2", the first encrypts card numbers, all
    # decrypt (rotation); and the key CVVs, number lookups and card tokens are derived from.
    # Generated once and kept in the database in sandbox when unset.
    card_data_key: str | None = None
    card_verification_key: str | None = None
    redis_url: str | None = None
    node_id: int | None = Field(default=None, ge=0, le=1023)

    session_idle_seconds: int = Field(default=300, ge=1)
    session_absolute_seconds: int = Field(default=12 * 3600, ge=1)
    idempotency_retention_hours: int = Field(default=24, ge=24)
    # How often each process purges idempotency records and codes past retention (0: never).
    housekeeping_interval_seconds: float = Field(default=3600, ge=0)
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)

    argon2_memory_kib: int = Field(default=19 * 1024, ge=8)
    argon2_time_cost: int = Field(default=2, ge=1)
    argon2_parallelism: int = Field(default=1, ge=1)
    # Hashes computed at once (threads); more than the cores only thrash their caches. 0: cores.
    argon2_threads: int = Field(default=0, ge=0)

    # Rate limits (D7, docs/decisions/0008): limits-library strings, several windows joined with
    # ';'. Login, code sending and code verifying are counted apart. The three operation limits
    # apply per e-mail (or per invited user); `rate_limit_ip` and `rate_limit_api_key` apply per
    # client IP and per API key to each of the three. The IP and key limits are generous on
    # purpose: users behind one NAT (or every client, behind a proxy whose X-Forwarded-For is not
    # trusted) share an IP, and a programme's whole user base logs in through its key.
    rate_limit_login: str = "20/minute;200/hour"
    rate_limit_code_send: str = "10/minute;50/hour"
    rate_limit_code_verify: str = "20/minute;200/hour"
    rate_limit_ip: str = "1000/minute;20000/hour"
    rate_limit_api_key: str = "2000/minute;50000/hour"
    # Key prefix in Redis, so several deployments (or test runs) can share one Redis.
    rate_limit_namespace: str = "multibank"
    # Take the client IP from the last X-Forwarded-For entry (the one our own proxy added).
    # Only behind a proxy that sets it: otherwise any client could pick its own IP.
    trust_forwarded_for: bool = False
    # Wrong admin tokens (operator API, portal sign-in, /metrics) each client address may send
    # before every admin authentication from it answers 429 (decision 0038).
    rate_limit_admin_auth: str = "10/minute;100/hour"

    # Delivery of live messages (D1, docs/decisions/0008). E-mail goes through SMTP when
    # smtp_host is set, else to the log; SMS always goes to the log.
    smtp_host: str | None = None
    smtp_port: int = Field(default=587, ge=1, le=65535)
    smtp_username: str | None = None
    smtp_password: str | None = None
    smtp_from: str | None = None
    smtp_starttls: bool = True
    smtp_ssl: bool = False  # implicit TLS (usually port 465); smtp_starttls is then ignored
    smtp_timeout_seconds: float = Field(default=10.0, gt=0)
    # Seconds between polls of the outbox by each server process; 0 disables delivery here.
    outbox_poll_seconds: float = Field(default=1.0, ge=0)
    # How often each server process looks for payment steps that are due (challenge expiry,
    # wire transfer processing); 0 turns the loop off.
    payments_poll_seconds: float = Field(default=1.0, ge=0)
    # Webhooks (D16): how often each server process looks for events to deliver (0: never), and
    # whether live programmes may send to loopback, link-local or private addresses.
    webhooks_poll_seconds: float = Field(default=0.5, ge=0)
    webhooks_allow_private: bool = False
    # How long a process may take to send an event before another may send it again (it must
    # exceed the 10 s timeout of a send).
    webhooks_lease_seconds: float = Field(default=60, gt=10)
    outbox_batch_size: int = Field(default=20, ge=1, le=1000)
    outbox_max_attempts: int = Field(default=8, ge=1)

    # Browser origins allowed to call the APIs (CORS), e.g. ["https://app.example.com"]; none by
    # default, so no browser page of another origin can read an answer.
    cors_allowed_origins: list[str] = []

    log_level: str = "INFO"
    log_json: bool = True

    # Checked here, so every command refuses a wrong value in one line before doing anything.
    @field_validator("database_url")
    @classmethod
    def _a_supported_database(cls, url: str) -> str:
        check_url(url)
        return url

    @field_validator("jwt_keys")
    @classmethod
    def _jwt_keys_parse(cls, spec: str | None) -> str | None:
        if spec:
            TokenKeyring.parse(spec)
        return spec

    @field_validator("card_data_key")
    @classmethod
    def _card_data_keys_parse(cls, spec: str | None) -> str | None:
        if spec:
            parse_data_keys(spec)
        return spec

    @field_validator("card_verification_key")
    @classmethod
    def _card_verification_key_length(cls, key: str | None) -> str | None:
        if key is not None and len(key) < 32:
            raise ValueError("MULTIBANK_CARD_VERIFICATION_KEY needs at least 32 characters")
        return key

    @model_validator(mode="after")
    def _live_needs_secrets(self) -> Settings:
        if self.mode == "live":
            missing = [n for n in LIVE_SECRETS if not getattr(self, n)]
            if missing:
                names = ", ".join(f"MULTIBANK_{n.upper()}" for n in missing)
                raise ValueError(f"live mode refuses to start without {names}")
            if len(self.admin_token or "") < ADMIN_TOKEN_MIN_LIVE:
                raise ValueError(
                    f"live mode refuses an admin token shorter than {ADMIN_TOKEN_MIN_LIVE} "
                    "characters (MULTIBANK_ADMIN_TOKEN)"
                )
        return self

    @model_validator(mode="after")
    def _smtp_needs_a_sender(self) -> Settings:
        if self.smtp_host and not self.smtp_from:
            raise ValueError("MULTIBANK_SMTP_HOST needs MULTIBANK_SMTP_FROM")
        return self

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    @property
    def database_is_default(self) -> bool:
        """Whether the database is the default one, not MULTIBANK_DATABASE_URL's."""
        return "database_url" not in self.model_fields_set


@lru_cache
def get_settings() -> Settings:
    return Settings()

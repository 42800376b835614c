"""The long-lived objects one server process shares across requests.

Above the kernel and the settings (issue 42 §1): the container holds the settings with the kernel's
objects built from them, so it lives with neither; the kernel never imports the settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from multibank.kernel.carddata import CardKeyring
from multibank.kernel.clock import Clock
from multibank.kernel.db import Database
from multibank.kernel.hashing import PasswordHasher
from multibank.kernel.notify import LogNotifier, Notifier
from multibank.kernel.ratelimit import RateLimiter
from multibank.kernel.tokens import TokenKeyring
from multibank.settings import Settings


@dataclass
class Container:
    settings: Settings
    db: Database
    clock: Clock = field(default_factory=Clock)
    limiter: RateLimiter = field(default_factory=RateLimiter)
    notifier: Notifier = field(default_factory=LogNotifier)
    keyring: TokenKeyring | None = None  # loaded at start-up (sandbox keys live in the database)
    admin_token: str | None = None
    card_keyring: CardKeyring | None = None  # loaded at start-up, as `keyring`
    hasher: PasswordHasher = field(default_factory=lambda: PasswordHasher(19 * 1024, 2, 1))
    # What the layers above keep for this process (api/authcache.py), by name.
    caches: dict[str, Any] = field(default_factory=dict)

    def tokens(self) -> TokenKeyring:
        if self.keyring is None:
            raise RuntimeError("token keyring not loaded; call multibank.app.startup first")
        return self.keyring

    def card_keys(self) -> CardKeyring:
        if self.card_keyring is None:
            raise RuntimeError("card keyring not loaded; call multibank.app.startup first")
        return self.card_keyring

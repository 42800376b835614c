"""Imports every table module so Base.metadata knows the whole schema (migrations, tests)."""

from __future__ import annotations


def load_all() -> None:
    import multibank.accounts.iban
    import multibank.accounts.models
    import multibank.audit.models
    import multibank.beneficiaries.models
    import multibank.cards.authorisations
    import multibank.cards.models
    import multibank.factors.models
    import multibank.identities.models
    import multibank.kernel.codes
    import multibank.kernel.guesses
    import multibank.kernel.idempotency
    import multibank.kernel.node_lease
    import multibank.kernel.notify
    import multibank.kernel.secrets
    import multibank.kernel.tokens
    import multibank.ledger.models
    import multibank.linked_accounts.models
    import multibank.payments.models
    import multibank.portal.sessions
    import multibank.programmes.models
    import multibank.users.models
    import multibank.webhooks.models  # noqa: F401

"""Card data at rest (D20, D21): authenticated encryption under rotatable keys, stable lookup
hashes, CVVs and tokens."""

from __future__ import annotations

import itertools

import pytest

from multibank.kernel.carddata import CardDataError, CardKeyring
from multibank.settings import Settings

OLD = "k1:" + "a" * 40
NEW = "k2:" + "b" * 40
VERIFY = "v" * 40
NUMBER = "5555551234567892"


def test_a_rotated_keyring_reads_old_values_and_writes_new_ones():
    old = CardKeyring(OLD, VERIFY)
    stored = old.encrypt(NUMBER, 7)
    assert NUMBER not in stored and stored.startswith("a1:k1:")
    rotated = CardKeyring(f"{NEW},{OLD}", VERIFY)
    assert rotated.decrypt(stored, 7) == NUMBER
    again = rotated.reencrypt(stored, 7)
    assert again.startswith("a1:k2:") and CardKeyring(NEW, VERIFY).decrypt(again, 7) == NUMBER
    # Hashes, CVVs and tokens come from the verification key: the rotation keeps them.
    assert rotated.lookup_hash(NUMBER) == old.lookup_hash(NUMBER)
    assert rotated.cvv(NUMBER, "1229", 1) == old.cvv(NUMBER, "1229", 1)
    assert rotated.token(7, "CVV", 1) == old.token(7, "CVV", 1)
    with pytest.raises(CardDataError):
        CardKeyring(NEW, VERIFY).decrypt(stored, 7)  # the old key dropped too early


def test_an_altered_value_or_another_cards_is_refused():
    keys = CardKeyring(OLD, VERIFY)
    stored = keys.encrypt(NUMBER, 7)
    with pytest.raises(CardDataError):
        keys.decrypt(stored, 8)
    scheme, kid, payload = stored.split(":")
    flipped = payload[:-5] + ("A" if payload[-5] != "A" else "B") + payload[-4:]
    with pytest.raises(CardDataError):
        keys.decrypt(f"{scheme}:{kid}:{flipped}", 7)
    # Two encryptions of one number differ (a fresh nonce each).
    assert keys.encrypt(NUMBER, 7) != stored


def test_cvvs_and_tokens():
    keys = CardKeyring(OLD, VERIFY)
    cvv = keys.cvv(NUMBER, "1229", 1)
    assert len(cvv) == 3 and cvv.isdigit()
    assert {keys.cvv(NUMBER, "1229", v) for v in range(1, 30)} != {cvv}  # renewal changes it
    for card in range(200):
        token = keys.token(card, "CARD_NUMBER", 0)
        assert len(token) == 24 and token.isalnum() and token.isascii()
        assert not token.isdigit()
    assert keys.token(1, "CVV", 1) != keys.token(1, "CVV", 2)
    assert keys.token(1, "CVV", 1) != keys.token(1, "CARD_NUMBER", 1)


def test_card_tokens_fit_the_descriptions_lengths():
    """D21a: 16 and 3 characters (the description's `maxLength`), never digits only, the same
    for the same card and version, and a renewal's CVV token never the one before it."""
    keys = CardKeyring(OLD, VERIFY)
    for card in range(2000):
        number = keys.number_token(card)
        assert len(number) == 16 and number.isalnum() and number.isascii()
        assert not number.isdigit() and number == keys.number_token(card)
        tokens = [keys.cvv_token(card, version) for version in range(1, 6)]
        for token in tokens:
            assert len(token) == 3 and token.isalnum() and token.isascii()
            assert not token.isdigit()
        assert all(a != b for a, b in itertools.pairwise(tokens)), tokens
        assert tokens[2] == keys.cvv_token(card, 3)
    assert len({keys.number_token(card) for card in range(2000)}) == 2000


@pytest.mark.parametrize(
    "over",
    [
        {"card_data_key": "nocolon"},
        {"card_data_key": "k1:short"},
        {"card_data_key": f"{OLD},{OLD}"},
        {"card_verification_key": "short"},
    ],
)
def test_settings_refuse_malformed_card_keys(over):
    with pytest.raises(ValueError):
        Settings(**over)

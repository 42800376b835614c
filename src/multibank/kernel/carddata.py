"""Card data at rest and on the wire (D20, D21): card numbers encrypted under a rotatable key,
a keyed hash to find a card by its number, CVVs derived rather than stored, and tokens.

Encryption is AES-256-GCM (`cryptography`'s `AESGCM`, D20) under a key derived from the
card-data secret by HMAC, with a random 96-bit nonce and the scheme, key id and the card's id as
associated data: a value copied onto another card does not decrypt. The stored form names its
scheme (`a1`) and key id, so a later scheme or key reads beside the earlier ones.

The card-data keys rotate: "kid1:secret1,kid2:secret2", the first encrypts, every one decrypts.
The verification key (CVVs, lookup hashes, tokens) does not rotate with them: a number's hash
and CVV must stay the same while it is re-encrypted under a new key."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import string
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

SCHEME = "a1"
NONCE_BYTES = 12
TOKEN_LENGTH = 24
# What the API answers for a card's number and CVV (D21a): the lengths the public description
# allows those fields (`maxLength` 16 and 3), so a client validating answers accepts them.
NUMBER_TOKEN_LENGTH = 16
CVV_TOKEN_LENGTH = 3
_TOKEN_ALPHABET = string.ascii_letters + string.digits
_LETTERS = string.ascii_letters


class CardDataError(ValueError):
    """A stored value that this keyring cannot read (unknown key id, altered bytes)."""


def _derive(secret: bytes, label: str) -> bytes:
    return hmac.new(secret, label.encode(), hashlib.sha256).digest()


def _associated(kid: str, card_id: int, label: str = "") -> bytes:
    # The number's associated data has no label; other values (a PIN, a tokenised value) name
    # theirs, so that no stored value decrypts as another kind of value.
    base = f"{SCHEME}|{kid}|{card_id}"
    return (f"{base}|{label}" if label else base).encode()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class DataKey:
    kid: str
    aead: AESGCM


def parse_data_keys(spec: str) -> list[DataKey]:
    """ "kid:secret,…" (each secret at least 32 characters); ValueError names what is wrong."""
    keys: list[DataKey] = []
    for part in spec.split(","):
        kid, sep, secret = part.strip().partition(":")
        if not sep or not kid or not kid.isalnum() or len(secret) < 32:
            raise ValueError(
                "card-data keys are 'kid:secret,…' with alphanumeric key ids and secrets of at "
                "least 32 characters"
            )
        raw = secret.encode()
        keys.append(DataKey(kid, AESGCM(_derive(raw, "card data encryption"))))
    if len({k.kid for k in keys}) != len(keys):
        raise ValueError("card-data key ids must be distinct")
    return keys


def generate_data_keys() -> str:
    return f"k{secrets.token_hex(4)}:{secrets.token_urlsafe(32)}"


def generate_verification_key() -> str:
    return secrets.token_urlsafe(32)


class CardKeyring:
    def __init__(self, data_keys: str, verification_key: str) -> None:
        if len(verification_key) < 32:
            raise ValueError("the card verification key needs at least 32 characters")
        self.keys = parse_data_keys(data_keys)
        self.by_kid = {k.kid: k for k in self.keys}
        raw = verification_key.encode()
        self.lookup_key = _derive(raw, "card number lookup")
        self.cvv_key = _derive(raw, "card verification value")
        self.token_key = _derive(raw, "card data token")
        self.activation_key = _derive(raw, "physical card activation code")

    @property
    def current_kid(self) -> str:
        return self.keys[0].kid

    def encrypt(self, plaintext: str, card_id: int, label: str = "") -> str:
        key = self.keys[0]
        nonce = secrets.token_bytes(NONCE_BYTES)
        sealed = key.aead.encrypt(nonce, plaintext.encode(), _associated(key.kid, card_id, label))
        return f"{SCHEME}:{key.kid}:{_b64(nonce + sealed)}"

    def decrypt(self, stored: str, card_id: int, label: str = "") -> str:
        scheme, _, rest = stored.partition(":")
        kid, _, payload = rest.partition(":")
        key = self.by_kid.get(kid)
        if scheme != SCHEME or key is None:
            raise CardDataError(f"no card-data key {kid!r} in this keyring")
        raw = _unb64(payload)
        try:
            plain = key.aead.decrypt(
                raw[:NONCE_BYTES], raw[NONCE_BYTES:], _associated(kid, card_id, label)
            )
        except InvalidTag:
            raise CardDataError("card data altered or of another card") from None
        return plain.decode()

    def reencrypt(self, stored: str, card_id: int, label: str = "") -> str:
        """The same value under the current key (rotation: run over every card, then drop the
        old key)."""
        return self.encrypt(self.decrypt(stored, card_id, label), card_id, label)

    def activation_hash(self, card_id: int, code: str) -> str:
        """A physical card's activation code, kept only as this keyed hash (D25)."""
        return hmac.new(
            self.activation_key, f"{card_id}|{code}".encode(), hashlib.sha256
        ).hexdigest()

    def random_token(self) -> str:
        """A token of the same alphabet and length as `token`, drawn at random (tokenised
        values that belong to no card yet)."""
        chars = [secrets.choice(_TOKEN_ALPHABET) for _ in range(TOKEN_LENGTH)]
        if not any(c in _LETTERS for c in chars):
            chars[0] = secrets.choice(_LETTERS)
        return "".join(chars)

    def lookup_hash(self, number: str) -> str:
        return hmac.new(self.lookup_key, number.encode(), hashlib.sha256).hexdigest()

    def cvv(self, number: str, expiry_mmyy: str, version: int) -> str:
        digest = hmac.new(
            self.cvv_key, f"{number}|{expiry_mmyy}|{version}".encode(), hashlib.sha256
        ).digest()
        return f"{int.from_bytes(digest[:8], 'big') % 1000:03d}"

    def _derived(self, label: str, length: int) -> str:
        """`length` characters of [A-Za-z0-9] with at least one letter, from `label` alone."""
        digest = hmac.new(self.token_key, label.encode(), hashlib.sha256).digest()
        value = int.from_bytes(digest, "big")
        chars = []
        for _ in range(length):
            value, index = divmod(value, len(_TOKEN_ALPHABET))
            chars.append(_TOKEN_ALPHABET[index])
        if not any(c in _LETTERS for c in chars):
            chars[0] = _LETTERS[digest[-1] % len(_LETTERS)]
        return "".join(chars)

    def token(self, card_id: int, field: str, version: int) -> str:
        """24 characters of [A-Za-z0-9] with at least one letter, the same for the same card,
        field and version (D20), so no token reads as a number. A PIN's token; a card number's
        and CVV's before D21a, which detokenize still accepts."""
        return self._derived(f"{field}|{card_id}|{version}", TOKEN_LENGTH)

    def number_token(self, card_id: int) -> str:
        """The card number's token (D21a): 16 characters, one letter at least (never a card
        number), the same for the card's whole life."""
        return self._derived(f"CARD_NUMBER|{card_id}|{NUMBER_TOKEN_LENGTH}", NUMBER_TOKEN_LENGTH)

    def cvv_token(self, card_id: int, version: int) -> str:
        """The CVV's token at the card's `version` (D21a): 3 characters, one letter at least
        (never a CVV), and never the token of the version before, so a renewal always changes
        it however few the 3-character tokens are."""
        # A card starts at version 1; each renewal (or creation's draw again, D21a) adds one.
        token = ""
        for each in range(min(version, 1), version + 1):
            token = self._cvv_draw(card_id, each, token or None)
        return token

    def _cvv_draw(self, card_id: int, version: int, avoid: str | None) -> str:
        label = f"CVV|{card_id}|{version}|{CVV_TOKEN_LENGTH}"
        token = self._derived(label, CVV_TOKEN_LENGTH)
        again = 0
        while token == avoid:
            again += 1
            token = self._derived(f"{label}|{again}", CVV_TOKEN_LENGTH)
        return token

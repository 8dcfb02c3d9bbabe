"""People's SSH public keys: checked before they are kept (type, size, encoding), added and removed.

A key is one line of an OpenSSH `.pub` file: `<type> <base64> [comment]`. The key itself is parsed by
`cryptography` (a kept library, not our own wire-format code): the type word must match the type inside the
blob, RSA keys need at least 2048 bits, and nothing may precede the type (authorized_keys options such as
`command=` or `from=` are the portal's to write, never a user's). Only the type and the key are kept; the
comment is dropped (it often names a machine or a person's address, and the key's own name says what it is).

Subscribers learn of changes through `ssh_keys_changed` (jobs refreshes the authorized_keys of services).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
from dataclasses import dataclass

import django.dispatch
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import load_ssh_public_key
from django.conf import settings
from django.db import IntegrityError, transaction

from identity.models import SshKey

# The types OpenSSH accepts today and cryptography can read; DSA (ssh-dss) is gone from OpenSSH.
KEY_TYPES = (
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "ssh-rsa",
)
MIN_RSA_BITS = 2048
MAX_RSA_BITS = 16384
MAX_LINE = 16 * 1024  # a 16384-bit RSA key is under 3 KB of text; anything far longer is not a key
NAME_MAX = 100

ssh_keys_changed = django.dispatch.Signal()  # sender=SshKey, user=<the person whose keys changed>


class KeyRefused(ValueError):
    """The key (or its name) cannot be kept; `field` is the form/API field to name, the message says why."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class ParsedKey:
    key_type: str
    blob: str  # base64, as in the .pub file
    bits: int
    fingerprint: str  # "SHA256:<base64 without padding>", as `ssh-keygen -l` prints it

    @property
    def line(self) -> str:
        return f"{self.key_type} {self.blob}"


def _blob_type(raw: bytes) -> str:
    """The type name at the start of the key's wire encoding (a uint32 length, then the name)."""
    if len(raw) < 4:
        return ""
    (length,) = struct.unpack(">I", raw[:4])
    if length > 64 or len(raw) < 4 + length:
        return ""
    return raw[4 : 4 + length].decode("ascii", "replace")


def parse_public_key(text: str) -> ParsedKey:
    """Check one public key line; raises KeyRefused("public_key", why)."""
    line = (text or "").strip()
    if not line:
        raise KeyRefused(
            "public_key", "Paste the contents of your public key file (for example ~/.ssh/id_ed25519.pub)."
        )
    if "PRIVATE KEY" in line[:200]:  # a private key file is several lines: said before "one line"
        raise KeyRefused("public_key", "That is a private key: never share it. Paste the .pub file instead.")
    if len(line) > MAX_LINE or "\n" in line or "\r" in line:
        raise KeyRefused("public_key", "Give one key on one line, as in a .pub file.")
    parts = line.split()
    if parts[0] not in KEY_TYPES:
        allowed = ", ".join(KEY_TYPES)
        raise KeyRefused("public_key", f"The line must start with the key's type, one of: {allowed}.")
    if len(parts) < 2:
        raise KeyRefused("public_key", "The key's base64 part is missing after its type.")
    key_type, blob = parts[0], parts[1]
    try:
        raw = base64.b64decode(blob, validate=True)
    except (binascii.Error, ValueError):
        raise KeyRefused("public_key", "The key's base64 part is damaged (was it cut or wrapped?).") from None
    if _blob_type(raw) != key_type:
        raise KeyRefused("public_key", f"The key inside is not an {key_type} key: the line was edited or mixed up.")
    try:
        key = load_ssh_public_key(f"{key_type} {blob}".encode("ascii"))
    except (ValueError, UnsupportedAlgorithm):
        raise KeyRefused("public_key", "The key's base64 part is damaged (was it cut or wrapped?).") from None
    bits = getattr(key, "key_size", 256)
    if isinstance(key, rsa.RSAPublicKey) and not MIN_RSA_BITS <= bits <= MAX_RSA_BITS:
        raise KeyRefused(
            "public_key", f"This RSA key has {bits} bits; use at least {MIN_RSA_BITS} (or an ssh-ed25519 key)."
        )
    digest = base64.b64encode(hashlib.sha256(raw).digest()).decode().rstrip("=")
    return ParsedKey(key_type=key_type, blob=blob, bits=bits, fingerprint=f"SHA256:{digest}")


def key_add(*, user, name: str, public_key: str) -> SshKey:
    """Keep a key for `user`; raises KeyRefused naming the field. Stores nothing on refusal."""
    name = (name or "").strip()
    if not name:
        raise KeyRefused("name", "Give the key a name, e.g. the machine it lives on.")
    if len(name) > NAME_MAX:
        raise KeyRefused("name", f"At most {NAME_MAX} characters.")
    if "\x00" in name:  # PostgreSQL stores no NUL in text: refused here, not a 500 there
        raise KeyRefused("name", "The name may not contain NUL characters.")
    parsed = parse_public_key(public_key)
    if SshKey.objects.filter(user=user).count() >= settings.SSH_MAX_KEYS_PER_USER:
        raise KeyRefused(
            "public_key", f"You have {settings.SSH_MAX_KEYS_PER_USER} keys, the most allowed; remove one first."
        )
    try:
        with transaction.atomic():
            key = SshKey.objects.create(
                user=user, name=name, public_key=parsed.line, key_type=parsed.key_type,
                bits=parsed.bits, fingerprint=parsed.fingerprint,
            )  # fmt: skip
    except IntegrityError:
        raise KeyRefused("public_key", "You have added this key already.") from None
    transaction.on_commit(lambda: ssh_keys_changed.send(sender=SshKey, user=user))
    return key


def key_delete(*, key: SshKey) -> None:
    user = key.user
    key.delete()
    transaction.on_commit(lambda: ssh_keys_changed.send(sender=SshKey, user=user))

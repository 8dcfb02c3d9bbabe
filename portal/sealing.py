"""Sealing: values that only the engine may read.

The web process faces the internet and holds no write right in the cluster, so it never writes a user's
secret into Kubernetes itself. It seals the value to the engine's public key and hands the sealed text to
the engine through Celery; only the worker holds the private half, opens it and writes the Secret.
Private registry passwords are kept sealed in the database the same way (admin seals, the engine opens).

The construction is libsodium's sealed box (PyNaCl): a fresh X25519 key per value, XSalsa20-Poly1305, so
a sealed value can be opened only with the private key and any change to it is detected. Keys are 32
bytes written as standard base64 (44 characters); `python -m portal.sealing` or `manage.py seal_keypair` print a new pair.

Settings (read in portal/settings.py through env_seal_keys, below): PORTAL_SEAL_PUBLIC_KEY for every
process that seals (web, admin, migrations), PORTAL_SEAL_PRIVATE_KEY (or _FILE, a mounted Secret) for the
worker alone.
"""

from __future__ import annotations

import base64
import binascii

from nacl.exceptions import CryptoError
from nacl.public import PrivateKey, PublicKey, SealedBox

from portal.env import ConfigError, env_str

PREFIX = "sealed:v1:"  # versioned, so another scheme could be read beside this one later
KEY_BYTES = 32
HOW_TO_MAKE = "make a pair with `python -m portal.sealing` (or `manage.py seal_keypair`)"


class SealError(Exception):
    """A value could not be sealed or opened (no key here, another key, or a damaged value)."""


def generate_keypair() -> tuple[str, str]:
    """A new (public, private) pair, each as base64 text."""
    private = PrivateKey.generate()
    return _b64(bytes(private.public_key)), _b64(bytes(private))


def public_half(private_key: str, *, name: str = "the private key") -> str:
    return _b64(bytes(private_key_from(private_key, name=name).public_key))


def public_key_from(text: str, *, name: str) -> PublicKey:
    return PublicKey(_key_bytes(text, name=name))


def private_key_from(text: str, *, name: str) -> PrivateKey:
    return PrivateKey(_key_bytes(text, name=name))


def is_sealed(text: str) -> bool:
    return isinstance(text, str) and text.startswith(PREFIX)


def seal(value: str, *, public_key: str | None = None) -> str:
    """`value` sealed to the engine's public key, as text safe for JSON, a database column or a log line."""
    key = public_key if public_key is not None else _setting("PORTAL_SEAL_PUBLIC_KEY")
    if not key:
        raise SealError(f"PORTAL_SEAL_PUBLIC_KEY is not set; {HOW_TO_MAKE}")
    try:
        box = SealedBox(public_key_from(key, name="PORTAL_SEAL_PUBLIC_KEY"))
    except ConfigError as exc:
        raise SealError(str(exc)) from exc
    return PREFIX + _b64(box.encrypt(value.encode()))


def unseal(sealed: str, *, private_key: str | None = None) -> str:
    """The value inside; SealError when this process holds no private key or the value was not sealed to it."""
    key = private_key if private_key is not None else _setting("PORTAL_SEAL_PRIVATE_KEY")
    if not key:
        raise SealError("this process holds no PORTAL_SEAL_PRIVATE_KEY (only the engine's worker does)")
    if not is_sealed(sealed):
        raise SealError("not a sealed value")
    try:
        box = SealedBox(private_key_from(key, name="PORTAL_SEAL_PRIVATE_KEY"))
        return box.decrypt(base64.b64decode(sealed[len(PREFIX) :], validate=True)).decode()
    except (ConfigError, CryptoError, binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise SealError(
            "it was sealed to another key than this engine's (PORTAL_SEAL_PUBLIC_KEY and "
            "PORTAL_SEAL_PRIVATE_KEY must be one pair), or it is damaged"
        ) from exc


def require_public_key() -> None:
    """At the web's start: it cannot store a secret without the engine's public key."""
    if not _setting("PORTAL_SEAL_PUBLIC_KEY"):
        raise ConfigError(
            "PORTAL_SEAL_PUBLIC_KEY is not set: the web seals users' secrets and registry passwords to the "
            f"engine's public key and cannot store them without it; {HOW_TO_MAKE} and give the worker the "
            "private half (PORTAL_SEAL_PRIVATE_KEY or PORTAL_SEAL_PRIVATE_KEY_FILE)"
        )


def require_private_key() -> None:
    """At the worker's start: it cannot write users' secrets or pull Secrets without the private key."""
    if not _setting("PORTAL_SEAL_PRIVATE_KEY"):
        raise ConfigError(
            "PORTAL_SEAL_PRIVATE_KEY (or PORTAL_SEAL_PRIVATE_KEY_FILE) is not set: the worker opens the "
            "secrets and registry passwords the web sealed to its public key and cannot write them into "
            f"Kubernetes without it; {HOW_TO_MAKE} (the web gets PORTAL_SEAL_PUBLIC_KEY)"
        )


def _key_bytes(text: str, *, name: str) -> bytes:
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError, AttributeError):
        raw = b""
    if len(raw) != KEY_BYTES:
        raise ConfigError(f"{name} is not a key: expected {KEY_BYTES} bytes in base64 (44 characters); {HOW_TO_MAKE}")
    return raw


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _setting(name: str) -> str:
    from django.conf import settings  # read at call time: tests and the engine's processes set it late

    return getattr(settings, name, "") or ""


if __name__ == "__main__":
    # `python -m portal.sealing`: a new pair without Django's settings (docker-compose makes one this way
    # before its .env is complete). `manage.py seal_keypair` does the same and can write the key to a file.
    _public, _private = generate_keypair()
    print(f"PORTAL_SEAL_PUBLIC_KEY={_public}\nPORTAL_SEAL_PRIVATE_KEY={_private}")


def env_seal_keys() -> tuple[str, str]:
    """(PORTAL_SEAL_PUBLIC_KEY, PORTAL_SEAL_PRIVATE_KEY), each checked; either may be empty.

    A process given the private key (the worker) knows the public half; given both, they must be one
    pair, so a worker and a web configured from different pairs stop at start instead of losing secrets."""
    public = env_str("PORTAL_SEAL_PUBLIC_KEY").strip()
    private = env_str("PORTAL_SEAL_PRIVATE_KEY").strip()
    if public:
        public_key_from(public, name="PORTAL_SEAL_PUBLIC_KEY")
    if private:
        derived = public_half(private, name="PORTAL_SEAL_PRIVATE_KEY")
        if public and public != derived:
            raise ConfigError(
                "PORTAL_SEAL_PUBLIC_KEY is not the public half of PORTAL_SEAL_PRIVATE_KEY: give the web and "
                "the worker one pair (the public half of this private key is " + derived + ")"
            )
        public = derived
    return public, private

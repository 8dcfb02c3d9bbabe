"""SSH public keys are checked before they are kept (identity.sshkeys.parse_public_key): pure, no database.
Fingerprints agree with Debian's own `ssh-keygen -l`."""

from __future__ import annotations

import base64
import shutil
import subprocess

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from identity.sshkeys import KeyRefused, parse_public_key

OPENSSH = serialization.Encoding.OpenSSH
PUBLIC = serialization.PublicFormat.OpenSSH


def _line(key) -> str:
    return key.public_key().public_bytes(OPENSSH, PUBLIC).decode()


@pytest.fixture(scope="module")
def keys() -> dict[str, str]:
    return {
        "ed25519": _line(ed25519.Ed25519PrivateKey.generate()),
        "ecdsa": _line(ec.generate_private_key(ec.SECP256R1())),
        "rsa2048": _line(rsa.generate_private_key(public_exponent=65537, key_size=2048)),
        "rsa1024": _line(rsa.generate_private_key(public_exponent=65537, key_size=1024)),  # noqa: S505 - must be refused
    }


@pytest.mark.parametrize(("name", "key_type", "bits"), [
    ("ed25519", "ssh-ed25519", 256), ("ecdsa", "ecdsa-sha2-nistp256", 256), ("rsa2048", "ssh-rsa", 2048),
])  # fmt: skip
def test_good_keys_are_kept_without_their_comment(keys, name, key_type, bits):
    parsed = parse_public_key(f"  {keys[name]} alice@laptop \n")
    assert parsed.key_type == key_type
    assert parsed.bits == bits
    assert parsed.line == keys[name]
    assert "alice" not in parsed.line


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs OpenSSH's ssh-keygen")
def test_the_fingerprint_is_the_one_ssh_keygen_prints(keys, tmp_path):
    path = tmp_path / "k.pub"
    path.write_text(keys["ed25519"] + "\n")
    printed = subprocess.run(["ssh-keygen", "-l", "-f", str(path)], capture_output=True, text=True, check=True).stdout
    assert parse_public_key(keys["ed25519"]).fingerprint == printed.split()[1]


def _refusal(text: str) -> KeyRefused:
    with pytest.raises(KeyRefused) as refused:
        parse_public_key(text)
    assert refused.value.field == "public_key"
    return refused.value


def test_a_small_rsa_key_is_refused_with_its_size(keys):
    assert "1024 bits" in str(_refusal(keys["rsa1024"]))


@pytest.mark.parametrize(("text", "says"), [
    ("", "Paste"),
    ("ssh-dss AAAAB3NzaC1kc3MAAACBAP", "one of"),
    ('command="rm -rf /" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA', "one of"),
    ("ssh-ed25519", "missing"),
    ("ssh-ed25519 !!!notbase64!!!", "damaged"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----", "private key"),
    # The whole private key file pasted (the newcomer's likely slip): warned as such, not "one line".
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n", "never share"),
    ("-----BEGIN RSA PRIVATE KEY-----\r\nMIIEpAIBAAKCAQEA\r\n-----END RSA PRIVATE KEY-----", "never share"),
    ("ssh-ed25519 AAAA\nssh-ed25519 AAAA", "one line"),
])  # fmt: skip
def test_what_is_not_a_public_key_line_is_refused_and_says_why(text, says):
    assert says in str(_refusal(text))


def test_a_type_word_that_does_not_match_the_key_inside_is_refused(keys):
    blob = keys["ecdsa"].split()[1]
    assert "not an ssh-ed25519 key" in str(_refusal(f"ssh-ed25519 {blob}"))


def test_a_cut_key_is_refused(keys):
    blob = base64.b64decode(keys["ed25519"].split()[1])[:-8]
    assert "damaged" in str(_refusal(f"ssh-ed25519 {base64.b64encode(blob).decode()}"))

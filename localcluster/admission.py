"""The portal's admission guard (admission/) as a part of the local cluster, so the API server enforces it.

It runs as the component "admission-guard", started before the API server and stopped after it, on
127.0.0.1 with a serving certificate signed by the cluster's CA (the webhook's caBundle is that CA).
Being part of the cluster, it is up whenever the API server is: a registration with failurePolicy Fail
can never wedge the cluster while tests or `make run` come and go. What is registered with it, and for
which provisioner, is up to each portal installation (devtools/admission_guard.py); the cluster only
says where the guard is, in <state dir>/admission-guard.json, and forgets stale registrations on start.
"""

from __future__ import annotations

import http.client
import json
import ssl
import sys
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization

from localcluster.pki import Pki

INFO_FILE = "admission-guard.json"
# Registrations made for this cluster carry this label; a restarted cluster deletes them (their portal
# registers again), so none can point at a port the guard no longer has.
REGISTRATION_LABEL = "gpuportal.io/local-admission-guard"


def guard_cert(pki: Pki) -> tuple[Path, Path]:
    """The guard's serving certificate and key, minted from the cluster CA (again if the CA is newer)."""
    cert, key = pki.directory / "admission-guard.crt", pki.directory / "admission-guard.key"
    if _issued_by_ca(pki, cert, key):
        return cert, key
    pki.issue(cert, key, "gpuportal-admission-guard", None, ["localhost"], ["127.0.0.1"], server=True)
    return cert, key


def _issued_by_ca(pki: Pki, cert: Path, key: Path) -> bool:
    try:
        issued = x509.load_pem_x509_certificate(cert.read_bytes())
        issued.verify_directly_issued_by(x509.load_pem_x509_certificate(pki.ca_cert.read_bytes()))
        serialization.load_pem_private_key(key.read_bytes(), password=None)
    except (OSError, ValueError, TypeError, InvalidSignature):
        return False
    return True


def guard_argv(pki: Pki, port: int) -> list[str]:
    cert, key = guard_cert(pki)
    return [
        sys.executable,
        "-m",
        "admission",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--cert",
        str(cert),
        "--key",
        str(key),
    ]


def guard_healthy(port: int, ca_file: Path) -> bool:
    context = ssl.create_default_context(cafile=str(ca_file))
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=2, context=context)
    try:
        conn.request("GET", "/healthz")
        return conn.getresponse().read() == b"ok"
    finally:
        conn.close()


def write_info(state_dir: Path, port: int, ca_file: Path) -> None:
    body = {"url": f"https://127.0.0.1:{port}", "ca_file": str(ca_file)}
    (state_dir / INFO_FILE).write_text(json.dumps(body, indent=2) + "\n")


def forget_registrations(port: int, token: str, ca_file: Path) -> None:
    """Delete the registrations an earlier run of this cluster left (their portals register again)."""
    context = ssl.create_default_context(cafile=str(ca_file))
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
    try:
        conn.request(
            "DELETE",
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations?labelSelector=" + REGISTRATION_LABEL,
            headers={"Authorization": f"Bearer {token}"},
        )
        conn.getresponse().read()
    finally:
        conn.close()

"""Certificates and keys for the local cluster, made with `cryptography` (no openssl/cfssl needed).

Everything lives in <state_dir>/pki and is reused on the next start, so service-account tokens stored in
etcd stay valid across `down`/`up`. EC P-256 keys: generating them is instant, unlike RSA.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 3650


@dataclass(frozen=True)
class Pki:
    directory: Path

    @property
    def ca_cert(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.directory / "ca.key"

    @property
    def apiserver_cert(self) -> Path:
        return self.directory / "apiserver.crt"

    @property
    def apiserver_key(self) -> Path:
        return self.directory / "apiserver.key"

    @property
    def kubelet_client_cert(self) -> Path:
        return self.directory / "apiserver-kubelet-client.crt"

    @property
    def kubelet_client_key(self) -> Path:
        return self.directory / "apiserver-kubelet-client.key"

    @property
    def kubelet_serving_cert(self) -> Path:
        return self.directory / "kubelet.crt"

    @property
    def kubelet_serving_key(self) -> Path:
        return self.directory / "kubelet.key"

    @property
    def sa_key(self) -> Path:
        return self.directory / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.directory / "sa.pub"

    @property
    def token_file(self) -> Path:
        return self.directory / "tokens.csv"

    @property
    def admin_token_file(self) -> Path:
        return self.directory / "admin.token"

    def all_files(self) -> list[Path]:
        return [
            self.ca_cert,
            self.ca_key,
            self.apiserver_cert,
            self.apiserver_key,
            self.kubelet_client_cert,
            self.kubelet_client_key,
            self.kubelet_serving_cert,
            self.kubelet_serving_key,
            self.sa_key,
            self.sa_pub,
            self.token_file,
            self.admin_token_file,
        ]

    def admin_token(self) -> str:
        return self.admin_token_file.read_text().strip()

    def ensure(self) -> bool:
        """Create whatever is missing or unreadable. Returns True when the CA was (re)made."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.directory.chmod(0o700)
        if all(p.is_file() and p.stat().st_size > 0 for p in self.all_files()) and self._loads():
            return False
        # Partial or corrupt PKI (a crash mid-write): start it over as a whole, never half.
        for p in self.all_files():
            p.unlink(missing_ok=True)
        self._generate()
        return True

    def _loads(self) -> bool:
        try:
            for cert in (
                self.ca_cert,
                self.apiserver_cert,
                self.kubelet_client_cert,
                self.kubelet_serving_cert,
            ):
                x509.load_pem_x509_certificate(cert.read_bytes())
            for key in (self.ca_key, self.apiserver_key, self.kubelet_client_key, self.sa_key):
                serialization.load_pem_private_key(key.read_bytes(), password=None)
            return bool(self.admin_token())
        except (ValueError, OSError):
            return False

    def _generate(self) -> None:
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpuportal-localcluster-ca")])
        now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
        ca_cert = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(ca_key, hashes.SHA256())
        )
        _write_key(self.ca_key, ca_key)
        _write(self.ca_cert, ca_cert.public_bytes(serialization.Encoding.PEM))

        serving_names = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"]
        serving_ips = ["127.0.0.1", "10.96.0.1"]
        self._leaf(
            ca_key,
            ca_cert,
            self.apiserver_cert,
            self.apiserver_key,
            "kube-apiserver",
            None,
            serving_names,
            serving_ips,
            server=True,
        )
        # The API server shows this to the simulated kubelets when it proxies logs; system:masters so
        # the (absent) kubelet authorizer question never arises.
        self._leaf(
            ca_key,
            ca_cert,
            self.kubelet_client_cert,
            self.kubelet_client_key,
            "kube-apiserver-kubelet-client",
            "system:masters",
            [],
            [],
            server=False,
        )
        self._leaf(
            ca_key,
            ca_cert,
            self.kubelet_serving_cert,
            self.kubelet_serving_key,
            "gpuportal-simulated-kubelet",
            None,
            ["localhost"],
            ["127.0.0.1"],
            server=True,
        )

        sa_key = ec.generate_private_key(ec.SECP256R1())
        _write_key(self.sa_key, sa_key)
        _write(
            self.sa_pub,
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
        )
        token = secrets.token_hex(24)
        _write(self.admin_token_file, (token + "\n").encode())
        # Static token file: token,user,uid,"group1,group2"
        _write(self.token_file, f'{token},admin,admin,"system:masters"\n'.encode())

    def issue(
        self,
        cert_path: Path,
        key_path: Path,
        common_name: str,
        organization: str | None,
        dns_names: list[str],
        ips: list[str],
        *,
        server: bool,
    ) -> None:
        """A certificate signed by this cluster's CA (the real nodes' kubelets: client and serving)."""
        ca_key = serialization.load_pem_private_key(self.ca_key.read_bytes(), password=None)
        assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
        ca_cert = x509.load_pem_x509_certificate(self.ca_cert.read_bytes())
        self._leaf(ca_key, ca_cert, cert_path, key_path, common_name, organization, dns_names, ips, server=server)

    @staticmethod
    def _leaf(
        ca_key: ec.EllipticCurvePrivateKey,
        ca_cert: x509.Certificate,
        cert_path: Path,
        key_path: Path,
        common_name: str,
        organization: str | None,
        dns_names: list[str],
        ips: list[str],
        *,
        server: bool,
    ) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        if organization:
            attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
        now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
        )
        if dns_names or ips:
            sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
            sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        _write_key(key_path, key)
        _write(cert_path, cert.public_bytes(serialization.Encoding.PEM))


def _write(path: Path, data: bytes) -> None:
    # Write then rename: a crash never leaves a half-written file that looks complete.
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.chmod(0o600)
    tmp.replace(path)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    _write(
        path,
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        ),
    )

"""Throwaway TLS certificates for the tests, made with the machine's ``openssl``: a CA, a
server certificate it signs (for ``localhost`` and 127.0.0.1 only), and an unrelated CA for the
"wrong CA" cases."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass


def _openssl(*args: str, cwd: str) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise RuntimeError("openssl is not on PATH (Debian: apt-get install openssl)")
    done = subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args[:2])} failed: {done.stderr}")


@dataclass
class Certs:
    folder: str

    def path(self, name: str) -> str:
        return os.path.join(self.folder, name)

    @property
    def ca(self) -> str:
        return self.path("ca.crt")

    @property
    def other_ca(self) -> str:
        return self.path("other-ca.crt")

    @property
    def server_cert(self) -> str:
        return self.path("server.crt")

    @property
    def server_key(self) -> str:
        return self.path("server.key")


def _ca(folder: str, name: str) -> None:
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.crt",
        "-days",
        "2",
        "-subj",
        f"/CN=ctrlrun test {name}",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
        cwd=folder,
    )


def make_certs(folder: str) -> Certs:
    os.makedirs(folder, exist_ok=True)
    _ca(folder, "ca")
    _ca(folder, "other-ca")
    _openssl(
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
        cwd=folder,
    )
    with open(os.path.join(folder, "server.ext"), "w") as f:
        f.write(
            "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
            "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n"
            "extendedKeyUsage=serverAuth\n"
        )
    _openssl(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "server.ext",
        cwd=folder,
    )
    return Certs(folder)

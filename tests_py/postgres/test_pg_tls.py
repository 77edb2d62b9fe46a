"""PostgreSQL over TLS, with libpq's sslmode meanings (issue #11, item 1), against a real
TLS-only throwaway cluster: ``ssl=on`` with a certificate made here with ``openssl`` for
localhost and 127.0.0.1, and a pg_hba.conf that only has ``hostssl`` lines (plaintext is
rejected by the server). The cluster also listens on 127.0.0.2, a name the certificate does not
carry."""

from __future__ import annotations

import os
import time
import uuid

import pytest

import ctrlrun
from ctrlrun import InvalidArgument, StoreError
from tests_py.support.certs import make_certs
from throwaway.pgserver import start_cluster

HBA = """\
local all all trust
hostssl all all 127.0.0.1/32 scram-sha-256
hostssl all all 127.0.0.2/32 scram-sha-256
hostnossl all all all reject
"""


@pytest.fixture(scope="module")
def tls_pg(tmp_path_factory):
    certs = make_certs(str(tmp_path_factory.mktemp("certs")))
    cluster = start_cluster(
        settings={"ssl": "on", "ssl_cert_file": "server.crt", "ssl_key_file": "server.key"},
        hba=HBA,
        files={"server.crt": certs.server_cert, "server.key": certs.server_key},
    )
    try:
        yield cluster, certs
    finally:
        cluster.stop()


def url(cluster, host: str = "127.0.0.1", **options: str) -> str:
    schema = "tls_" + uuid.uuid4().hex[:12]
    query = "&".join([f"schema={schema}", *(f"{k}={v}" for k, v in options.items())])
    return f"{cluster.url(host)}?{query}"


def protected_call_runs_once(store_url: str) -> None:
    runs = []

    @ctrlrun.protect("tls.pay", effect="pay:{order}", store=store_url)
    def pay(order: str) -> int:
        runs.append(order)
        return 1

    assert pay("o1") == 1
    with pytest.raises(ctrlrun.DuplicateEffect):
        pay("o1")
    assert runs == ["o1"]


def test_require_encrypts_and_works(tls_pg):
    cluster, _ = tls_pg
    protected_call_runs_once(url(cluster, sslmode="require"))


def test_prefer_takes_the_tls_the_server_offers(tls_pg):
    # The server rejects plaintext: a prefer that downgraded could not connect at all.
    cluster, _ = tls_pg
    protected_call_runs_once(url(cluster))
    protected_call_runs_once(url(cluster, sslmode="prefer"))


def test_verify_full_with_the_servers_ca_works(tls_pg):
    cluster, certs = tls_pg
    protected_call_runs_once(url(cluster, sslmode="verify-full", sslrootcert=certs.ca))
    protected_call_runs_once(url(cluster, "localhost", sslmode="verify-full", sslrootcert=certs.ca))


def test_verify_full_refuses_a_host_the_certificate_does_not_name(tls_pg):
    cluster, certs = tls_pg
    with pytest.raises(StoreError) as info:
        ctrlrun.open_store(url(cluster, "127.0.0.2", sslmode="verify-full", sslrootcert=certs.ca))
    assert "certificate" in str(info.value).lower()
    assert cluster.password not in str(info.value)
    # verify-ca checks the chain only, as libpq does
    protected_call_runs_once(url(cluster, "127.0.0.2", sslmode="verify-ca", sslrootcert=certs.ca))


@pytest.mark.parametrize("mode", ["verify-ca", "verify-full", "require"])
def test_a_wrong_ca_is_refused_with_a_clear_error(tls_pg, mode):
    cluster, certs = tls_pg
    started = time.monotonic()
    with pytest.raises(StoreError) as info:
        ctrlrun.open_store(url(cluster, sslmode=mode, sslrootcert=certs.other_ca))
    message = str(info.value)
    assert "cannot connect to the PostgreSQL store" in message
    assert "UnknownIssuer" in message or "unknown issuer" in message.lower(), message
    assert cluster.password not in message
    assert time.monotonic() - started < 15


def test_plaintext_is_refused_by_the_server(tls_pg):
    cluster, _ = tls_pg
    with pytest.raises(StoreError) as info:
        ctrlrun.open_store(url(cluster, sslmode="disable"))
    assert "no encryption" in str(info.value) or "pg_hba.conf" in str(info.value)


def test_a_verifying_mode_without_a_root_certificate_says_what_it_needs(
    tls_pg, monkeypatch, tmp_path
):
    cluster, _ = tls_pg
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.postgresql/root.crt there
    with pytest.raises(StoreError) as info:
        ctrlrun.open_store(url(cluster, sslmode="verify-full"))
    assert "root.crt" in str(info.value) and "sslrootcert" in str(info.value)


@pytest.mark.parametrize(
    "options, word",
    [
        ({"sslmode": "allow"}, "sslmode"),
        ({"sslmode": "verify_full"}, "sslmode"),
        ({"sslmode": "require", "sslcert": "/x.crt"}, "sslkey"),
        ({"sslmode": "disable", "sslrootcert": "/x.crt"}, "disable"),
        ({"sslrootcert": ""}, "sslrootcert"),
    ],
)
def test_bad_tls_settings_are_refused_before_connecting(options, word):
    target = "postgresql://u:s3cr3t@127.0.0.1:1/db?" + "&".join(
        f"{k}={v}" for k, v in options.items()
    )
    with pytest.raises(InvalidArgument) as info:
        ctrlrun.open_store(target)
    assert word in str(info.value) and "s3cr3t" not in str(info.value)


def test_a_unix_socket_connects_without_tls_and_refuses_a_mode_that_insists(pg_unix):
    socket_dir, port = pg_unix
    base = f"postgresql://postgres@/postgres?host={socket_dir}&port={port}"
    for mode in ("", "&sslmode=prefer", "&sslmode=disable"):
        protected_call_runs_once(f"{base}{mode}&schema=unix_{uuid.uuid4().hex[:10]}")
    with pytest.raises(InvalidArgument, match="Unix-domain"):
        ctrlrun.open_store(f"{base}&sslmode=require&schema=unix_x")


@pytest.fixture(scope="module")
def pg_unix():
    cluster = start_cluster()
    try:
        yield os.path.dirname(cluster.datadir), cluster.port
    finally:
        cluster.stop()

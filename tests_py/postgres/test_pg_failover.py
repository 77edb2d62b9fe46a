"""Multi-host URLs, ``target_session_attrs`` and ``load_balance_hosts`` (issue #11, item 2; every
libpq value: issue 46, item 4), with two real throwaway clusters: one started with ``default_transaction_read_only=on`` (standing in for a
standby: it accepts connections and refuses writes), one ordinary primary. The URL lists the
standby first, as a failover set-up does after the roles swapped."""

from __future__ import annotations

import subprocess
import uuid

import pytest

import ctrlrun
from ctrlrun import StoreError
from throwaway.pgserver import _find_bin, start_cluster


@pytest.fixture(scope="module")
def pair():
    standby = start_cluster(settings={"default_transaction_read_only": "on"})
    try:
        primary = start_cluster()
        try:
            yield standby, primary
        finally:
            primary.stop()
    finally:
        standby.stop()


def both_hosts(standby, primary, schema: str, **options: str) -> str:
    auth = f"postgres:{primary.password}"
    query = "&".join([f"schema={schema}", *(f"{k}={v}" for k, v in options.items())])
    return f"postgresql://{auth}@127.0.0.1:{standby.port},127.0.0.1:{primary.port}/postgres?{query}"


def schemas_on(cluster) -> set:
    out = subprocess.run(
        [
            _find_bin("psql"),
            "-h",
            "127.0.0.1",
            "-p",
            str(cluster.port),
            "-U",
            "postgres",
            "-d",
            "postgres",
            "-Atqc",
            "SELECT nspname FROM pg_namespace",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PGPASSWORD": cluster.password, "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split())


def test_read_write_skips_the_standby_and_writes_on_the_primary(pair):
    standby, primary = pair
    schema = "ha_" + uuid.uuid4().hex[:12]
    store_url = both_hosts(standby, primary, schema, target_session_attrs="read-write")
    runs = []

    @ctrlrun.protect("ha.pay", effect="pay:{order}", store=store_url)
    def pay(order: str) -> int:
        runs.append(order)
        return 1

    for order in ("o1", "o2", "o3"):
        assert pay(order) == 1
    with pytest.raises(ctrlrun.DuplicateEffect):
        pay("o1")
    assert runs == ["o1", "o2", "o3"]
    assert schema in schemas_on(primary)
    assert schema not in schemas_on(standby)
    with ctrlrun.open_store(store_url) as store:
        assert store.url.count(",") == 1  # both hosts named, no password
        assert primary.password not in store.url
        assert [r.effect_key for r in store.list_effects()] == ["pay:o1", "pay:o2", "pay:o3"]


def test_without_read_write_a_standby_is_never_written_silently(pair):
    standby, primary = pair
    schema = "ha_" + uuid.uuid4().hex[:12]
    with pytest.raises(StoreError) as info:
        ctrlrun.open_store(both_hosts(standby, primary, schema))
    assert "read-only" in str(info.value)
    assert schema not in schemas_on(standby) and schema not in schemas_on(primary)


def test_a_url_of_two_standbys_fails_closed(pair):
    standby, _ = pair
    schema = "ha_" + uuid.uuid4().hex[:12]
    auth = f"postgres:{standby.password}"
    target = (
        f"postgresql://{auth}@127.0.0.1:{standby.port},127.0.0.2:{standby.port}/postgres"
        f"?schema={schema}&target_session_attrs=read-write"
    )
    with pytest.raises(StoreError) as info:
        ctrlrun.open_store(target)
    assert standby.password not in str(info.value)


@pytest.mark.parametrize("attrs", ["read-write", "primary"])
@pytest.mark.parametrize("balance", ["disable", "random"])
def test_every_libpq_value_that_finds_the_primary_works(pair, attrs, balance):
    standby, primary = pair
    schema = "ha_" + uuid.uuid4().hex[:12]
    url = both_hosts(
        standby, primary, schema, target_session_attrs=attrs, load_balance_hosts=balance
    )
    with ctrlrun.open_store(url) as store:
        store.reserve_effect("k", "act_libpq_values", 60)
    assert schema in schemas_on(primary) and schema not in schemas_on(standby)


@pytest.mark.parametrize(
    "option, named",
    [
        ("target_session_attrs=standby", "target_session_attrs=standby would choose a server"),
        ("target_session_attrs=read-only", "target_session_attrs=read-only would choose"),
        ("target_session_attrs=prefer-standby", "target_session_attrs=prefer-standby would"),
        ("target_session_attrs=prefer-primary", "target_session_attrs must be any, read-write"),
        ("load_balance_hosts=sometimes", "load_balance_hosts must be disable or random"),
    ],
)
def test_a_value_that_cannot_serve_a_store_is_refused_by_name(pair, option, named):
    standby, primary = pair
    schema = "ha_" + uuid.uuid4().hex[:12]
    name, value = option.split("=")
    with pytest.raises(ctrlrun.InvalidArgument) as info:
        ctrlrun.open_store(both_hosts(standby, primary, schema, **{name: value}))
    assert named in str(info.value)
    assert primary.password not in str(info.value)
    assert schema not in schemas_on(primary)

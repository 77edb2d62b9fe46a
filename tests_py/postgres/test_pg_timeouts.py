"""Every wait on PostgreSQL is bounded (issue #11, item 3): a listener that accepts and never
answers, a server whose answers stop coming, and a COMMIT held by the fault proxy. The bound is
the URL's ``timeout`` (seconds, every exchange) and libpq's ``connect_timeout`` (start-up)."""

from __future__ import annotations

import socket
import threading
import time

import pytest

import ctrlrun
from ctrlrun import EffectState, StoreError, StoreUnresolved


@pytest.fixture
def silent_listener():
    """Accepts connections and never says a word."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


@pytest.mark.parametrize("options", ["connect_timeout=1", "connect_timeout=1&timeout=0.5"])
def test_a_server_that_never_answers_fails_the_open_within_the_bound(silent_listener, options):
    started = time.monotonic()
    with pytest.raises(StoreError) as info:
        ctrlrun.open_store(f"postgresql://u:s3cr3t@127.0.0.1:{silent_listener}/db?{options}")
    assert time.monotonic() - started < 5
    assert "s3cr3t" not in str(info.value)


def bounded_store(pg, pg_schema, proxy, timeout: float = 1.0):
    base = pg.url(pg_schema, host=proxy.host, port=proxy.port)
    return ctrlrun.open_store(f"{base}&timeout={timeout}")


def counted(store, runs):
    @ctrlrun.protect("slow.pay", effect="pay:{order}", store=store)
    def pay(order: str) -> int:
        runs.append(order)
        return len(runs)

    return pay


def test_answers_that_stop_coming_are_bounded_and_never_run_the_executor(
    pg, pg_schema, proxy, direct
):
    """The reservation is one statement that commits by itself: once it is sent, an answer
    that does not come leaves it unknown, and the re-read decides; when the re-read gets no
    answer either, the call is unresolved within the bounds, and nothing runs (docs/spec.md: an
    unknown commit is never taken for a failed one)."""
    base = pg.url(pg_schema, host=proxy.host, port=proxy.port)
    store = ctrlrun.open_store(f"{base}&timeout=1&connect_timeout=1")
    runs: list = []
    pay = counted(store, runs)
    assert pay("o1") == 1  # the connection is up
    proxy.delay = 5.0  # every answer now takes 5 s: past the 1 s bound
    started = time.monotonic()
    with pytest.raises(StoreUnresolved) as info:
        pay("o2")
    assert time.monotonic() - started < 4
    assert "within 1 s" in str(info.value) and "the executor was not run" in str(info.value)
    started = time.monotonic()
    with pytest.raises(StoreError, match="within 1 s"):  # a read is bounded the same way
        store.get_effect("pay:o1")
    assert time.monotonic() - started < 4
    assert runs == ["o1"]
    time.sleep(5.5)  # the delayed answers arrive (to connections given up on)
    proxy.delay = 0.0
    # the reservation had reached the server: the key is held by the attempt that never ran,
    # so a retry is refused, never run a second time
    row = direct.get_effect("pay:o2")
    assert row.state is EffectState.EXECUTING and row.action_id == info.value.action_id
    with pytest.raises(ctrlrun.DuplicateEffect) as again:
        pay("o2")
    assert again.value.state == "in_progress"
    assert runs == ["o1"]
    store.close()


def test_a_commit_held_past_the_bound_is_unresolved_when_the_reread_fails(
    pg, pg_schema, proxy, direct
):
    store = bounded_store(pg, pg_schema, proxy)
    runs: list = []
    pay = counted(store, runs)
    rule = proxy.arm("hold", b"ctrlrun_reserve($1", then_refuse=True)
    started = time.monotonic()
    with pytest.raises(StoreUnresolved) as info:
        pay("o3")
    assert time.monotonic() - started < 8
    assert rule.fired == 1
    assert runs == []  # the executor never ran
    assert info.value.effect_key == "pay:o3"
    rule._release.set()
    store.close()


def test_a_commit_held_past_the_bound_is_settled_by_the_reread(pg, pg_schema, proxy, direct):
    """The COMMIT never reached the server: abandoning the connection rolls its transaction
    back, the re-read on a fresh connection finds no row, and the insert is tried again."""
    store = bounded_store(pg, pg_schema, proxy)
    runs: list = []
    pay = counted(store, runs)
    rule = proxy.arm("hold", b"ctrlrun_reserve($1")
    started = time.monotonic()
    assert pay("o4") == 1
    assert time.monotonic() - started < 8
    assert rule.fired == 1
    assert runs == ["o4"]
    assert direct.get_effect("pay:o4").state is EffectState.COMMITTED
    store.close()


def test_a_silent_first_host_gets_its_own_bound_and_the_next_host_is_used(
    silent_listener, pg, pg_schema
):
    # libpq's rule: connect_timeout bounds each host, so a host that accepts and then stalls
    # does not stop a failover to the next one on the list.
    auth = pg.user + (f":{pg.password}" if pg.password else "")
    url = (
        f"postgresql://{auth}@127.0.0.1:{silent_listener},{pg.host}:{pg.port}/{pg.db}"
        f"?schema={pg_schema}&connect_timeout=1"
    )
    started = time.monotonic()
    with ctrlrun.open_store(url) as store:
        store.reserve_effect("pay:o1", "act_" + "7" * 32, 60)
        assert store.get_effect("pay:o1").state is EffectState.RESERVED
    assert time.monotonic() - started < 10


def test_every_host_silent_fails_naming_each_host_within_their_bounds(silent_listener):
    url = (
        f"postgresql://u:s3cr3t@127.0.0.1:{silent_listener},"
        f"127.0.0.2:{silent_listener}/db?connect_timeout=1"
    )
    started = time.monotonic()
    with pytest.raises(StoreError) as info:
        ctrlrun.open_store(url)
    assert time.monotonic() - started < 2 * 1 + 3
    message = str(info.value)
    assert f"127.0.0.1:{silent_listener}: no answer" in message, message
    assert f"127.0.0.2:{silent_listener}:" in message, message
    assert "s3cr3t" not in message

"""What a client on this machine, a malformed name or a store that went away cannot do to the
console: an ``X-Forwarded-For`` header does not make a client the trusted proxy nor another
address for the sign-in limit; a name the store would refuse is just an unknown account; a
store that cannot be reached is said so on the page (503), never a 500 or a dropped
connection."""

from __future__ import annotations

import httpx2 as httpx
import pytest

import ctrlrun
from ctrlrun.console.state import Settings, networks
from tests_py.console.rig import SECRET, Console, csrf_in, signed_in, small_limiter
from tests_py.console.test_console_security import ask

sqlite_only = pytest.mark.parametrize("backend", ["sqlite"])


def _attempt(http: httpx.Client, name: str, secret: str, **headers: str) -> httpx.Response:
    token = csrf_in(http.get("/signin").text)
    data = {"csrf": token, "account": name, "secret": secret}
    return http.post("/signin", data=data, headers=headers)


@sqlite_only
def test_x_forwarded_for_does_not_make_a_local_client_the_trusted_proxy(console_store):
    console = Console(
        console_store,
        Settings(proxy_header="X-Forwarded-User", trusted_proxies=networks(["10.9.9.9"])),
    )
    try:
        console.add("alice")
        spoofed = {"X-Forwarded-User": "alice", "X-Forwarded-For": "10.9.9.9"}
        with httpx.Client(base_url=console.url, headers=spoofed) as http:
            r = http.get("/approvals")
            assert r.status_code == 303 and r.headers["location"].startswith("/signin")
    finally:
        console.stop()


@sqlite_only
def test_x_forwarded_for_does_not_escape_the_per_address_sign_in_limit(console_store):
    console = Console(console_store, **small_limiter())  # 3 per account and address, 5 per address
    try:
        console.add("alice")
        with httpx.Client(base_url=console.url) as http:
            codes = [
                _attempt(http, f"nobody{i}", "x", **{"X-Forwarded-For": f"203.0.113.{i}"})
                for i in range(6)
            ]
            assert [r.status_code for r in codes] == [401] * 5 + [429]
    finally:
        console.stop()


@sqlite_only
def test_a_name_no_account_can_have_is_an_unknown_account_not_an_error(console_store, capfd):
    console = Console(
        console_store,
        Settings(proxy_header="X-Forwarded-User", trusted_proxies=networks(["127.0.0.1"])),
    )
    try:
        console.add("alice")
        with httpx.Client(base_url=console.url) as http:
            for name in ("alice ", " alice", "a" * 300, "alice\u200b", "al\tice"):
                r = _attempt(http, name, SECRET)
                assert r.status_code == 401, (name, r.status_code)
                assert "Unknown account or wrong secret" in r.text
            r = http.get("/approvals", headers={"X-Forwarded-User": "a" * 300})
            assert r.status_code == 303 and r.headers["location"].startswith("/signin")
            r = http.get("/approvals", headers={"X-Forwarded-User": "alice"})
            assert r.status_code == 200  # the same connection, still served
    finally:
        console.stop()
    assert "Traceback" not in capfd.readouterr().err  # the server logged no traceback


def test_a_store_that_went_away_is_said_so_on_the_page(pg, pg_schema, proxy, capfd):
    store = ctrlrun.open_store(pg.url(pg_schema, host=proxy.host, port=proxy.port))
    console = Console(store)
    try:
        console.add("alice")
        rid = ask(store, "pi_gone")
        http = signed_in(console)
        token = csrf_in(http.get(f"/approvals/{rid}").text)
        proxy.refuse_new()
        proxy.drop_all()
        for path in ("/approvals", "/effects", f"/approvals/{rid}", "/effects/refund:pi_gone"):
            r = http.get(path)
            assert r.status_code == 503 and "The store could not be used" in r.text, path
            r = http.get(path, headers={"X-Ctrlrun-Fragment": "1"})
            assert r.status_code == 503, path
        r = http.post(f"/approvals/{rid}/grant", data={"csrf": token})
        assert r.status_code == 503 and "The store could not be used" in r.text
        assert "postgresql://" not in r.text  # where the store is: in the log only
        with httpx.Client(base_url=console.url) as stranger:  # signing in reads the store
            assert _attempt(stranger, "alice", SECRET).status_code == 503
        proxy.refuse_new(False)  # back: the same client, the same console
        assert http.get("/approvals").status_code == 200
        http.close()
    finally:
        console.stop()
        store.close()
    assert "Traceback" not in capfd.readouterr().err  # the server logged no traceback


@sqlite_only
def test_an_unexpected_failure_is_the_error_page_and_the_connection_stays(
    console, monkeypatch, capfd
):
    from ctrlrun.console import routes_effects

    def broken(state):
        raise RuntimeError("a defect")

    http = signed_in(console)
    monkeypatch.setattr(routes_effects, "_listed", broken)
    for _ in range(3):
        r = http.get("/effects")
        assert r.status_code == 500 and "The console could not do that" in r.text
        assert r.headers["x-frame-options"] == "DENY"
    assert http.get("/approvals").status_code == 200
    http.close()
    assert "Traceback" not in capfd.readouterr().err

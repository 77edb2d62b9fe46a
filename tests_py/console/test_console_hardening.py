"""What a client on this machine, a malformed name or a store that went away cannot do to the
console: an ``X-Forwarded-For`` header does not make a client the trusted proxy nor another
address for the sign-in limit; a name the store would refuse is just an unknown account; a
store that cannot be reached is said so on the page (503), never a 500 or a dropped
connection."""

from __future__ import annotations

import httpx2 as httpx
import pytest

from ctrlrun.console.state import Settings, networks
from tests_py.console.rig import Console, csrf_in, small_limiter

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
    console = Console(console_store, **small_limiter())  # 3 per account, 5 per address
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

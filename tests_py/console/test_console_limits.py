"""The sign-in limits under concurrency, from many loopback addresses (Linux routes all of
127.0.0.0/8 to ``lo``): attempts are counted before their slow check, so many at once are no
more than the limit; one address's failures do not lock a person out at another address; the
limiter's memory stays bounded in bytes, whatever the names tried."""

from __future__ import annotations

import gc
import threading
import tracemalloc
from typing import List

import httpx2 as httpx
import pytest

from ctrlrun.console.ratelimit import Attempt, Refused, SignInLimiter
from tests_py.console.rig import SECRET, Console, csrf_in

sqlite_only = pytest.mark.parametrize("backend", ["sqlite"])


def _client(console: Console, address: str) -> httpx.Client:
    # a connection per request: one kept alive while the others get their forms would be
    # closed as idle (5 s) on a loaded machine, and a POST on it reset
    limits = httpx.Limits(max_keepalive_connections=0)
    transport = httpx.HTTPTransport(local_address=address, limits=limits)
    return httpx.Client(base_url=console.url, transport=transport, timeout=120)


def _at_once(console: Console, tries: List[tuple]) -> List[int]:
    """Each ``(address, account, secret)`` posted from its own client, all released together
    (each has its sign-in form first); the status codes in order."""
    codes = [0] * len(tries)
    ready = threading.Barrier(len(tries))

    def one(i: int, address: str, name: str, secret: str) -> None:
        with _client(console, address) as http:
            token = csrf_in(http.get("/signin").text)
            ready.wait()
            data = {"csrf": token, "account": name, "secret": secret}
            codes[i] = http.post("/signin", data=data).status_code

    threads = [threading.Thread(target=one, args=(i, *t)) for i, t in enumerate(tries)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return codes


@sqlite_only
def test_many_attempts_at_once_on_one_account_are_checked_no_more_than_the_limit(console_store):
    console = Console(console_store)  # the defaults: 5 per account and address
    try:
        console.add("alice")
        codes = _at_once(console, [("127.0.0.2", "alice", "wrong")] * 39)
        assert codes.count(401) == 5 and codes.count(429) == 34, codes
        # the 40th, with the right secret, is not checked either
        assert _at_once(console, [("127.0.0.2", "alice", SECRET)]) == [429]
        # from another address the person signs in: the guesser's failures are not theirs
        assert _at_once(console, [("127.0.0.3", "alice", SECRET)]) == [303]
    finally:
        console.stop()


@sqlite_only
def test_many_attempts_at_once_from_one_address_are_checked_no_more_than_the_limit(console_store):
    console = Console(console_store, limiter=SignInLimiter(per_address=10))
    try:
        console.add("alice")
        tries = [("127.0.0.4", f"nobody{i}", "wrong") for i in range(100)]
        codes = _at_once(console, tries)
        assert codes.count(401) == 10 and codes.count(429) == 90, codes
        assert _at_once(console, [("127.0.0.4", "alice", SECRET)]) == [429]
        assert _at_once(console, [("127.0.0.5", "alice", SECRET)]) == [303]
    finally:
        console.stop()


@sqlite_only
def test_guesses_on_one_account_from_many_addresses_stay_within_its_budget(console_store):
    limiter = SignInLimiter(per_pair=3, per_account=12, account_window=3600)
    console = Console(console_store, limiter=limiter)
    try:
        console.add("alice")
        console.add("bob")
        tries = [(f"127.0.0.{10 + i % 20}", "alice", "wrong") for i in range(60)]
        codes = _at_once(console, tries)
        assert codes.count(401) == 12 and codes.count(429) == 48, codes
        # the budget is this account's: bob, from one of those addresses, signs in
        assert _at_once(console, [("127.0.0.10", "bob", SECRET)]) == [303]
    finally:
        console.stop()


def test_a_success_gives_its_attempt_back_and_forgets_the_typos():
    limiter = SignInLimiter(per_pair=3, per_address=100, per_account=100)
    for _ in range(2):
        assert isinstance(limiter.reserve("alice", "10.0.0.1"), Attempt)  # two typos
    good = limiter.reserve("alice", "10.0.0.1")
    assert isinstance(good, Attempt)
    assert isinstance(limiter.reserve("alice", "10.0.0.1"), Refused)  # 3 counted
    limiter.succeeded(good)
    assert all(isinstance(limiter.reserve("alice", "10.0.0.1"), Attempt) for _ in range(3))


def test_the_limiter_memory_is_bounded_in_bytes_not_only_in_keys():
    limiter = SignInLimiter(max_keys=3000)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(1000):
            limiter.reserve(f"{i:05d}" + "n" * 60_000, f"10.1.{i // 250}.{i % 250}")
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # 1000 attempts with 60 KB names (60 MB of names): under 1 KB a key, whatever the name
    assert limiter.keys() == 3000
    assert held < 3000 * 1024, held
    # full of recent failures: a new attempt is refused (fail closed), not counted
    refused = limiter.reserve("someone", "10.2.0.1")
    assert isinstance(refused, Refused) and refused.busy
    assert limiter.keys() <= 3000

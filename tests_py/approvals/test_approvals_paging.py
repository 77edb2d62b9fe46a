"""Listing approval requests and effects a page at a time, filtered by the database: states as
of the store's clock (a pending request past its time is expired), action, key prefix, who
asked; pages that join up with nothing missed or repeated, ties in time broken by id, both
orders; counts; cursors that are not a listing's refused. Real stores, both backends."""

from __future__ import annotations

from typing import Any, Callable, List

import pytest

import ctrlrun
from ctrlrun import ApprovalRequired, InvalidArgument


def ask(store, action: str, key_prefix: str, who: str, n: int) -> List[str]:
    """``n`` real pending requests of ``action`` asked by ``who``, keys ``key_prefix<i>``."""

    @ctrlrun.protect(
        action, effect=key_prefix + "{i}", decision="approve", store=store, requested_by=who
    )
    def call(i: int) -> int:
        return i

    ids = []
    for i in range(n):
        with pytest.raises(ApprovalRequired) as info:
            call(i)
        ids.append(info.value.request_id)
    return ids


def walk(page: Callable[..., List[Any]], size: int, cursor_of=lambda r: r.cursor) -> List[Any]:
    """Every record ``page(after=…, limit=size)`` gives, page after page."""
    seen: List[Any] = []
    after = None
    while True:
        got = page(after=after, limit=size)
        assert len(got) <= size
        seen += got
        if len(got) < size:
            return seen
        after = cursor_of(got[-1])


@pytest.fixture
def requests(clocked_store, clock):
    """23 requests: some asked at the same instant (ties), two actions, three askers; then
    three denied, two granted, and five left to expire."""
    s = clocked_store
    ids = ask(s, "acme.refund", "refund:pi_", "agent-a", 8)  # 8 at one instant
    clock.advance(1)
    ids += ask(s, "acme.refund", "refund:%_", "agent-b", 5)
    clock.advance(1)
    ids += ask(s, "acme.wire", "wire:ü€😀", "agent-c", 10)
    for rid in ids[:3]:
        s.deny_approval(rid, by="alice")
    for rid in ids[3:5]:
        s.grant_approval(rid, by="alice")
    return ids


def test_states_are_read_as_of_the_stores_clock(clocked_store, clock, requests):
    s = clocked_store
    assert s.count_approvals("pending") == 18
    assert [r.request_id for r in s.list_approvals("denied")] == sorted(requests[:3])  # one instant
    clock.advance(3601 * 24)  # every request's time is over (the default ttl is a day)
    assert s.count_approvals("pending") == 0
    assert s.count_approvals(["expired"]) == 20  # the granted ones expire too
    assert {r.state.value for r in s.list_approvals("expired")} == {"expired"}
    assert s.count_approvals(["denied", "expired"]) == 23
    assert s.count_approvals("expired", cap=7) == 7


def test_filters_combine_in_the_database(clocked_store, requests):
    s = clocked_store
    assert len(s.list_approvals(action="acme.refund")) == 13
    assert len(s.list_approvals(prefix="refund:%_")) == 5  # % and _ are plain text
    assert len(s.list_approvals(prefix="refund:%")) == 5
    assert len(s.list_approvals(prefix="refund:")) == 13
    assert len(s.list_approvals(prefix="wire:ü€😀")) == 10
    assert len(s.list_approvals(prefix="wire:ü€😁")) == 0
    assert len(s.list_approvals(requested_by="agent-a")) == 8
    mixed = s.list_approvals("pending", action="acme.refund", requested_by="agent-a")
    assert [r.request_id for r in mixed] == sorted(requests[5:8])  # one instant: by id
    assert s.count_approvals("pending", action="acme.refund", requested_by="agent-a") == 3
    assert s.list_approvals(action="nope") == []


@pytest.mark.parametrize("newest_first", [False, True])
@pytest.mark.parametrize("size", [1, 3, 8])
def test_pages_join_up(clocked_store, requests, newest_first, size):
    s = clocked_store
    whole = s.list_approvals(newest_first=newest_first)
    assert len(whole) == 23
    times = [r.requested_at for r in whole]
    assert times == sorted(times, reverse=newest_first)
    paged = walk(lambda **kw: s.list_approvals(newest_first=newest_first, **kw), size)
    assert [r.request_id for r in paged] == [r.request_id for r in whole]
    pending = walk(lambda **kw: s.list_approvals("pending", newest_first=newest_first, **kw), size)
    assert len(pending) == 18 and len({r.request_id for r in pending}) == 18


def test_effects_page_in_both_orders(clocked_store, clock):
    s = clocked_store

    @ctrlrun.protect("acme.send", effect="send:{i}", store=s)
    def send(i: int) -> int:
        return i

    for i in range(12):
        send(i)
        if i % 5 == 4:
            clock.advance(1)  # runs of keys created at one instant
    for newest_first in (False, True):
        whole = s.list_effects(newest_first=newest_first)
        paged = walk(lambda nf=newest_first, **kw: s.list_effects(newest_first=nf, **kw), 5)
        assert [r.effect_key for r in paged] == [r.effect_key for r in whole]
        assert len(whole) == 12
    newest = s.list_effects("committed", newest_first=True, limit=2)
    assert [r.effect_key for r in newest] == ["send:11", "send:10"]
    after = s.list_effects("committed", prefix="send:1", after=newest[0].cursor, newest_first=True)
    assert [r.effect_key for r in after] == ["send:10", "send:1"]


@pytest.mark.parametrize(
    "cursor",
    ["", "12", ":apr_" + "0" * 32, "x:apr_" + "0" * 32, "1e3:k", "١٢:k", "9" * 20 + ":k", 5],
)
def test_a_cursor_not_of_a_listing_is_refused(store, cursor):
    for listing in (store.list_approvals, store.list_effects):
        with pytest.raises(InvalidArgument, match="after"):
            listing(after=cursor)


def test_an_effects_cursor_is_no_approvals_cursor(store):
    with pytest.raises(InvalidArgument, match="not an approval request's id"):
        store.list_approvals(after="1700000000000000:refund:pi_1")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"state": []}, "state is empty"),
        ({"state": ["pending", "done"]}, "'done' is not one of"),
        ({"state": 3}, "a state or a list of states"),
        ({"limit": 0}, "limit must be a positive integer"),
        ({"limit": True}, "limit must be a positive integer"),
        ({"newest_first": "yes"}, "newest_first must be True or False"),
        ({"action": 3}, "must be a str"),
        ({"prefix": "a\ud800"}, "lone surrogate"),
        ({"prefix": "a\0"}, "the prefix filter holds a NUL"),
        ({"requested_by": "\0x"}, "the requested_by filter holds a NUL"),
    ],
)
def test_bad_filters_are_refused(store, kwargs, message):
    with pytest.raises(InvalidArgument, match=message):
        store.list_approvals(**kwargs)

"""Bad input is refused with the documented exception, never a crash (docs/spec.md §7, §8.1, §8.3)."""

from __future__ import annotations

from datetime import timedelta

import pytest

import ctrlrun
from ctrlrun import EffectState, InvalidArgument

# --------------------------------------------------------------------------------------------
# leases
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "lease",
    [
        0,
        -1,
        0.0,
        -0.5,
        float("nan"),
        float("inf"),
        float("-inf"),
        "5",
        True,
        False,
        None.__class__,
        timedelta(0),
        timedelta(seconds=-1),
        [5],
    ],
    ids=[
        "zero",
        "minus-one",
        "zero-float",
        "negative-float",
        "nan",
        "inf",
        "-inf",
        "str",
        "True",
        "False",
        "type",
        "timedelta-0",
        "timedelta-neg",
        "list",
    ],
)
def test_bad_lease_is_refused_at_decoration(store, lease):
    calls = []

    def f(a):
        calls.append(a)

    with pytest.raises(InvalidArgument) as ei:
        ctrlrun.protect("lease", effect="l:{a}", lease=lease, store=store)(f)
    assert "lease" in str(ei.value)
    assert calls == []
    assert store.list_effects() == []


@pytest.mark.parametrize("lease", [1, 0.5, 300, timedelta(minutes=2)])
def test_good_lease_is_accepted_and_used(clocked_store, clock, lease):
    seen = {}

    @ctrlrun.protect("lease", effect="l:{a}", lease=lease, store=clocked_store)
    def f(a):
        seen["rec"] = clocked_store.get_effect(f"l:{a}")
        return a

    f("x")
    want = lease if isinstance(lease, timedelta) else timedelta(seconds=lease)
    assert seen["rec"].lease_expires_at == clock.now + want


def test_default_lease_is_five_minutes(clocked_store, clock):
    seen = {}

    @ctrlrun.protect("lease", effect="l:{a}", store=clocked_store)
    def f(a):
        seen["rec"] = clocked_store.get_effect(f"l:{a}")

    f("x")
    assert seen["rec"].lease_expires_at == clock.now + timedelta(minutes=5)


# --------------------------------------------------------------------------------------------
# resolver
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "resolver",
    ["ops:alice\nops:bob", "ops\n", "\nops", "a\r\nb", ""],
    ids=["newline-mid", "newline-end", "newline-start", "crlf", "empty"],
)
def test_resolver_must_be_one_printable_line(store, second_store, resolver):
    @ctrlrun.protect("r", effect="r:{a}", store=store)
    def f(a):
        raise ValueError("lost")

    with pytest.raises(ValueError):
        f("1")
    before = second_store.get_effect("r:1")
    assert before.state == EffectState.AMBIGUOUS

    for state in ("failed", "committed"):
        with pytest.raises(InvalidArgument) as ei:
            store.resolve_effect("r:1", state, resolver)
        assert "resolver" in str(ei.value)
    assert second_store.get_effect("r:1") == before  # the row is unchanged


def test_resolve_of_a_row_that_is_not_ambiguous_is_refused(store, second_store):
    @ctrlrun.protect("r", effect="r:{a}", store=store)
    def f(a):
        return 1

    f("2")
    before = second_store.get_effect("r:2")
    with pytest.raises(InvalidArgument) as ei:
        store.resolve_effect("r:2", "failed", "ops:alice")
    assert "committed" in str(ei.value)
    assert second_store.get_effect("r:2") == before
    with pytest.raises(InvalidArgument):
        store.resolve_effect("r:missing", "failed", "ops:alice")


def test_line_separators_are_refused_in_action_ids_and_resolvers(store, second_store):
    for bad in ("act_a\u2028b", "act_a\u2029b"):
        with pytest.raises(InvalidArgument, match="action id"):
            store.reserve_effect("sep:1", bad, 60)
    assert store.get_effect("sep:1") is None
    store.reserve_effect("sep:2", "act_" + "1" * 32, 60)
    store.mark_ambiguous("sep:2", "act_" + "1" * 32, "lost")
    before = second_store.get_effect("sep:2")
    # line breaks, and the invisible characters that make a name read as another
    for bad in (
        "ops:alice\u2028ops:bob",
        "ops\u2029",
        "\u202eecila:spo",
        "ops:\u200balice",
        "ops:alice\ufeff",
        "ops:\u2066alice\u2069",
        "ops:alice\U000e0041",
    ):
        with pytest.raises(InvalidArgument, match="resolver"):
            store.resolve_effect("sep:2", "failed", bad)
    assert second_store.get_effect("sep:2") == before
    # the zero-width non-joiner and joiner are letters' business (Persian names, emoji)
    assert (
        store.resolve_effect("sep:2", "failed", "ops:\u0645\u06cc\u200c\u0631\u0627").state.value
        == "failed"
    )
    with pytest.raises(InvalidArgument, match="by must be one printable line"):
        store.prune(older_than=60, by="evil\x1b[2J\nsecond line")


@pytest.mark.parametrize("attempt", [2**63, -(2**63) - 1, 1.5, "1"])
def test_an_attempt_the_core_cannot_take_is_invalid_not_a_type_or_overflow_error(store, attempt):
    store.reserve_effect("att:1", "act_" + "2" * 32, 60)
    for write in (
        lambda: store.begin_execution("att:1", "act_" + "2" * 32, attempt=attempt),
        lambda: store.commit_effect("att:1", "act_" + "2" * 32, attempt=attempt),
        lambda: store.fail_effect("att:1", "act_" + "2" * 32, "x", attempt=attempt),
        lambda: store.mark_ambiguous("att:1", "act_" + "2" * 32, "x", attempt=attempt),
        lambda: store.extend_lease(
            "att:1", "act_" + "2" * 32, timedelta(minutes=9), attempt=attempt
        ),
    ):
        with pytest.raises(InvalidArgument):
            write()
    assert store.get_effect("att:1").state.value == "reserved"
    for ask in (
        lambda: store.get_approval(5),
        lambda: store.get_approval(None),
        lambda: store.grant_approval(5, "ops:alice"),
    ):
        with pytest.raises(InvalidArgument):
            ask()


# --------------------------------------------------------------------------------------------
# numbers and text the store cannot keep: a typed error, nothing written
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("lease", [10**400, -(10**400), 10**13, 1e300])
def test_a_huge_lease_is_invalid_not_an_overflow(store, lease):
    with pytest.raises(InvalidArgument, match="lease"):
        store.reserve_effect("huge:1", "act_" + "2" * 32, lease)
    with pytest.raises(InvalidArgument, match="lease"):
        ctrlrun.protect("h", effect="h:{a}", lease=lease, store=store)
    assert store.list_effects() == []


def test_lone_surrogates_through_the_store_api_are_invalid(store, second_store):
    aid = "act_" + "3" * 32
    calls = [
        lambda: store.reserve_effect("sur\udc80", aid, 60),
        lambda: store.reserve_effect("sur:1", "act_\udc80", 60),
        lambda: store.get_effect("sur\udc80"),
    ]
    for call in calls:
        with pytest.raises(InvalidArgument, match="lone surrogate"):
            call()
    store.reserve_effect("sur:2", aid, 60)
    store.begin_execution("sur:2", aid)
    before = second_store.get_effect("sur:2")
    for call in [
        lambda: store.fail_effect("sur:2", aid, "err\udc80"),
        lambda: store.mark_ambiguous("sur:2", aid, "\ud800"),
        lambda: store.begin_execution("sur:2", "act_\udfff"),
    ]:
        with pytest.raises(InvalidArgument, match="lone surrogate"):
            call()
    assert second_store.get_effect("sur:2") == before
    assert [r.effect_key for r in store.list_effects()] == ["sur:2"]


def test_a_clock_near_the_year_9999_writes_no_unreadable_row(store_url, store):
    from datetime import datetime, timezone

    late = datetime(9999, 12, 1, tzinfo=timezone.utc)
    with ctrlrun.open_store(store_url, clock=lambda: late) as clocked:
        with pytest.raises(InvalidArgument, match="years 1 to 9999"):
            clocked.reserve_effect("y:1", "act_" + "4" * 32, timedelta(days=60))
        f = ctrlrun.protect("y", effect="y:{a}", lease=timedelta(days=60), store=clocked)(
            lambda a: 1
        )
        with pytest.raises(InvalidArgument, match="years 1 to 9999"):
            f("2")
    assert store.list_effects() == []  # nothing written, and the listing still works


def test_an_extension_past_the_ten_year_cap_is_refused(store, second_store):
    from datetime import datetime, timezone

    aid = "act_" + "5" * 32
    store.reserve_effect("ext:1", aid, 60)
    store.begin_execution("ext:1", aid)
    before = second_store.get_effect("ext:1")
    for until in (datetime.max.replace(tzinfo=timezone.utc), timedelta(days=3700)):
        with pytest.raises(InvalidArgument, match="ten years"):
            store.extend_lease("ext:1", aid, until)
    assert second_store.get_effect("ext:1") == before
    assert len(store.list_effects()) == 1


# --------------------------------------------------------------------------------------------
# store URLs and files
# --------------------------------------------------------------------------------------------

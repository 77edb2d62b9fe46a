"""The extension's boundary (src/py/convert.rs): what Python passes is converted once, and
what the core cannot take is refused as ``InvalidArgument`` by the conversion itself, on every
backend, with nothing written; an interrupt raised while converting is never swallowed."""

from __future__ import annotations

import pytest

import ctrlrun
from ctrlrun import EffectState, InvalidArgument
from tests_py.support.cli import assert_one_line_error, run_cli

AID = "act_" + "7" * 32


class HostileStr(str):
    """A str subclass whose own methods raise: the conversion must not call them."""

    def __getitem__(self, index):
        raise RuntimeError("the caller's __getitem__ ran")


class Interrupting:
    def __index__(self):
        raise KeyboardInterrupt


def _nothing_written(store):
    return (store.list_effects(), store.list_approvals(), store.list_approvers())


def test_a_lone_surrogate_in_a_str_subclass_is_named_without_running_its_methods(store):
    before = _nothing_written(store)
    for call in (
        lambda: store.reserve_effect(HostileStr("k\ud800"), AID, 60),
        lambda: store.get_effect(HostileStr("k\udfff")),
        lambda: store.add_approver(HostileStr("bob\ud800"), "hash"),
    ):
        with pytest.raises(InvalidArgument, match=r"U\+D[8F]\w\w \(a lone surrogate\) at char"):
            call()
    assert _nothing_written(store) == before


def test_an_interrupt_raised_while_converting_an_integer_is_raised_as_it_is(store):
    store.reserve_effect("k:1", AID, 60)
    with pytest.raises(KeyboardInterrupt):
        store.begin_execution("k:1", AID, attempt=Interrupting())
    assert store.get_effect("k:1").state is EffectState.RESERVED


def test_an_integer_too_large_to_show_is_refused_with_its_type(store):
    store.reserve_effect("k:2", AID, 60)
    with pytest.raises(InvalidArgument, match="got a value of type int"):
        store.commit_effect("k:2", AID, attempt=10**5000)
    assert store.get_effect("k:2").state is EffectState.RESERVED


def test_states_and_str_subclasses_cross_as_what_they_name(store):
    store.reserve_effect("k:3", AID, 60)
    store.begin_execution("k:3", AID)
    store.mark_ambiguous("k:3", AID, "lost")
    store.resolve_effect(HostileStr("k:3"), EffectState.FAILED, HostileStr("ops:alice"))
    assert [r.effect_key for r in store.list_effects(state="failed")] == ["k:3"]
    assert store.list_effects(state=EffectState.FAILED) == store.list_effects(state="failed")
    with pytest.raises(InvalidArgument, match='unknown effect state "done"; expected one of'):
        store.resolve_effect("k:3", "done", "ops:alice")


def test_a_template_or_url_with_a_lone_surrogate_is_invalid(store):
    with pytest.raises(InvalidArgument, match="lone surrogate"):
        ctrlrun.protect("x", effect="k:\ud800{a}", store=store)
    with pytest.raises(InvalidArgument, match="lone surrogate"):
        ctrlrun.open_store("sqlite:///\udcff.db")


@pytest.mark.parametrize("rules", ["", {}, None, [("a", "allow", 1)]])
def test_a_policy_that_is_no_list_of_rules_is_refused_and_clears_nothing(store, rules):
    store.apply_policy([ctrlrun.ActionRule("a.b", "deny")])
    with pytest.raises(InvalidArgument, match="ActionRule"):
        store.apply_policy(rules)
    assert store.policy() == [ctrlrun.ActionRule("a.b", "deny", 1)]


def test_a_store_path_with_an_undecodable_byte_is_one_line(tmp_path):
    proc = run_cli("effects", "list", "--store", str(tmp_path) + "/\udcff.db")
    assert_one_line_error(proc, "lone surrogate")


def test_an_integer_past_pythons_digit_limit_is_a_typed_error(store):
    f = ctrlrun.protect("x", effect="k:{a}", store=store)(lambda a: 1)
    with pytest.raises(ctrlrun.EffectKeyError, match="too long to write as text"):
        f(10**5000)
    with pytest.raises(InvalidArgument, match="lease must be at most ten years, got an integer"):
        store.reserve_effect("k:4", AID, 10**5000)
    assert store.list_effects() == []

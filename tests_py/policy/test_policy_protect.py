"""The policy file through ``protect``: the template, precedence, deny, the file named by
``CTRLRUN_CONFIG`` and its changes on disk (the ``here`` fixture: tests_py/policy/conftest.py)."""

from __future__ import annotations

import asyncio
import warnings

import pytest

import ctrlrun
from ctrlrun import ActionDenied, EffectKeyError, EffectState, PolicyError, PolicyWarning
from tests_py.support.policy_files import write


def test_no_effect_takes_the_policy_template(here, store):
    write(
        here / "ctrlrun.yaml",
        """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "refund:{payment_id}"
        """,
    )
    calls = []

    @ctrlrun.protect("billing.refund", store=store)
    def refund(payment_id, amount):
        calls.append(payment_id)
        return amount

    assert refund("pi_1", 5) == 5
    assert [r.effect_key for r in store.list_effects()] == ["refund:pi_1"]
    assert store.get_effect("refund:pi_1").state == EffectState.COMMITTED
    # it is a real reservation: the same key is refused now
    with pytest.raises(ctrlrun.DuplicateEffect):
        refund("pi_1", 5)
    assert calls == ["pi_1"]


def test_no_effect_takes_the_policy_template_async(here, store):
    write(
        here / "ctrlrun.yaml",
        """\
        schema: ctrlrun.policy/v2
        actions:
          mail.send:
            effect: "mail:{to}"
        """,
    )

    @ctrlrun.protect("mail.send", store=store)
    async def send(to, body="hi"):
        return to

    assert asyncio.run(send("bob@example.com")) == "bob@example.com"
    assert [r.effect_key for r in store.list_effects()] == ["mail:bob@example.com"]


def test_policy_of_another_action_does_not_apply(here, store):
    write(
        here / "ctrlrun.yaml",
        """\
        schema: ctrlrun.policy/v2
        actions:
          other.action:
            decision: deny
        """,
    )

    @ctrlrun.protect("billing.refund", store=store)
    def refund(payment_id):
        return "ran"

    assert refund("pi_1") == "ran"  # no template anywhere: runs unreserved
    assert store.list_effects() == []


def test_policy_action_without_template_runs_unreserved(here, store):
    write(
        here / "ctrlrun.yaml",
        """\
        schema: ctrlrun.policy/v2
        actions:
          audit.log:
            decision: allow
        """,
    )
    calls = []

    @ctrlrun.protect("audit.log", store=store)
    def log(line):
        calls.append(line)
        return len(calls)

    assert log("a") == 1 and log("a") == 2
    assert store.list_effects() == []


def test_decorator_wins_with_one_warning(here, store):
    write(
        here / "ctrlrun.yaml",
        """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "policy-refund:{payment_id}"
        """,
    )

    @ctrlrun.protect("billing.refund", effect="refund:{payment_id}", store=store)
    def refund(payment_id):
        return payment_id

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for pid in ("pi_1", "pi_2", "pi_3", "pi_4"):
            assert refund(pid) == pid
    ours = [w for w in caught if issubclass(w.category, PolicyWarning)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    msg = str(ours[0].message)
    assert "refund:{payment_id}" in msg and "policy-refund:{payment_id}" in msg
    assert "billing.refund" in msg
    assert ours[0].filename == __file__  # points at the caller, not at ctrlrun's internals
    assert sorted(r.effect_key for r in store.list_effects()) == [
        "refund:pi_1",
        "refund:pi_2",
        "refund:pi_3",
        "refund:pi_4",
    ]


def test_warning_is_per_function(here, store):
    write(
        here / "ctrlrun.yaml",
        """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "policy:{payment_id}"
        """,
    )

    @ctrlrun.protect("billing.refund", effect="a:{payment_id}", store=store)
    def one(payment_id):
        return 1

    @ctrlrun.protect("billing.refund", effect="b:{payment_id}", store=store)
    def two(payment_id):
        return 2

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        one("x"), one("y"), two("x"), two("y")
    assert len([w for w in caught if issubclass(w.category, PolicyWarning)]) == 2


def test_no_warning_when_templates_agree(here, store):
    write(
        here / "ctrlrun.yaml",
        """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "refund:{payment_id}"
        """,
    )

    @ctrlrun.protect("billing.refund", effect="refund:{payment_id}", store=store)
    def refund(payment_id):
        return payment_id

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        refund("pi_1"), refund("pi_2")
    assert not [w for w in caught if issubclass(w.category, PolicyWarning)]


@pytest.mark.parametrize("own_effect", [None, "refund:{payment_id}"])
def test_deny_refuses_before_any_reservation(here, store, own_effect):
    write(
        here / "ctrlrun.yaml",
        """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "refund:{payment_id}"
            decision: deny
        """,
    )
    calls = []

    @ctrlrun.protect("billing.refund", effect=own_effect, store=store)
    def refund(payment_id):
        calls.append(payment_id)

    with pytest.raises(ActionDenied) as info:
        refund("pi_1")
    assert calls == []
    assert store.list_effects() == []
    assert info.value.action == "billing.refund"
    assert info.value.policy == str(here / "ctrlrun.yaml")
    assert "billing.refund" in str(info.value)


def test_ctrlrun_config_names_the_file(here, store, tmp_path_factory, monkeypatch):
    # ./ctrlrun.yaml says one thing, CTRLRUN_CONFIG another: the named file is used
    write(
        here / "ctrlrun.yaml",
        """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            decision: deny
        """,
    )
    elsewhere = tmp_path_factory.mktemp("config") / "named.yaml"
    write(
        elsewhere,
        """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "named:{payment_id}"
        """,
    )
    monkeypatch.setenv("CTRLRUN_CONFIG", str(elsewhere))

    @ctrlrun.protect("billing.refund", store=store)
    def refund(payment_id):
        return payment_id

    assert refund("pi_9") == "pi_9"
    assert [r.effect_key for r in store.list_effects()] == ["named:pi_9"]


def test_ctrlrun_config_missing_file(here, store, monkeypatch):
    missing = here / "nowhere" / "policy.yaml"
    monkeypatch.setenv("CTRLRUN_CONFIG", str(missing))
    calls = []

    @ctrlrun.protect("billing.refund", effect="refund:{payment_id}", store=store)
    def refund(payment_id):
        calls.append(payment_id)

    with pytest.raises(PolicyError) as info:
        refund("pi_1")
    assert info.value.file == str(missing)
    assert "CTRLRUN_CONFIG" in str(info.value)
    assert calls == []
    assert store.list_effects() == []


def test_broken_policy_raises_at_call_and_nothing_runs(here, store):
    write(
        here / "ctrlrun.yaml",
        """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "refund:{payment_id}"
            decision: approve-maybe
        """,
    )
    calls = []

    @ctrlrun.protect("billing.refund", store=store)
    def refund(payment_id):
        calls.append(payment_id)

    with pytest.raises(PolicyError) as info:
        refund("pi_1")
    assert info.value.file == str(here / "ctrlrun.yaml")
    assert info.value.line == 5
    assert info.value.field == "actions.billing.refund.decision"
    assert "expected allow, approve or deny" in str(info.value)
    assert calls == [] and store.list_effects() == []


def test_policy_template_naming_no_parameter(here, store):
    write(
        here / "ctrlrun.yaml",
        """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "refund:{invoice}"
        """,
    )
    calls = []

    @ctrlrun.protect("billing.refund", store=store)
    def refund(payment_id):
        calls.append(payment_id)

    with pytest.raises(EffectKeyError) as info:
        refund("pi_1")
    assert "invoice" in str(info.value)
    assert calls == [] and store.list_effects() == []


def test_policy_change_on_disk_is_picked_up(here, store):
    policy = here / "ctrlrun.yaml"
    write(
        policy,
        """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "a:{payment_id}"
        """,
    )
    calls = []

    @ctrlrun.protect("billing.refund", store=store)
    def refund(payment_id):
        calls.append(payment_id)
        return payment_id

    refund("pi_1")
    assert [r.effect_key for r in store.list_effects()] == ["a:pi_1"]

    # a new template (different content and size): the next call uses it
    write(
        policy,
        """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "second-template:{payment_id}"
        """,
    )
    refund("pi_1")
    assert sorted(r.effect_key for r in store.list_effects()) == ["a:pi_1", "second-template:pi_1"]

    # now denied
    write(
        policy,
        """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "second-template:{payment_id}"
            decision: deny
        """,
    )
    with pytest.raises(ActionDenied):
        refund("pi_2")
    assert calls == ["pi_1", "pi_1"]

    # now broken
    write(
        policy,
        """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "b:{payment_id"
        """,
    )
    with pytest.raises(PolicyError) as info:
        refund("pi_2")
    assert info.value.line == 4

    # and gone: no policy, no template, the call runs unreserved
    policy.unlink()
    assert refund("pi_3") == "pi_3"
    assert calls == ["pi_1", "pi_1", "pi_3"]
    assert len(store.list_effects()) == 2


def test_policy_file_follows_the_working_directory(tmp_path, store, monkeypatch):
    monkeypatch.delenv("CTRLRUN_CONFIG", raising=False)
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    write(
        one / "ctrlrun.yaml",
        """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "one:{payment_id}"
        """,
    )
    write(
        two / "ctrlrun.yaml",
        """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            decision: deny
        """,
    )

    @ctrlrun.protect("billing.refund", store=store)
    def refund(payment_id):
        return payment_id

    monkeypatch.chdir(one)
    refund("pi_1")
    monkeypatch.chdir(two)
    with pytest.raises(ActionDenied):
        refund("pi_2")
    assert [r.effect_key for r in store.list_effects()] == ["one:pi_1"]

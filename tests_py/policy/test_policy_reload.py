"""The policy in force follows the file: an edit is seen by the next call, even one that keeps
the file's size and puts its modification time back (``cp -p``, ``rsync -a``, ``tar``)."""

from __future__ import annotations

import os

import pytest

import ctrlrun
from ctrlrun import ActionDenied

RESERVE = 'schema: ctrlrun.policy/v2\nactions:\n  billing.refund:\n    effect: "r:{payment_id}"\n'
DENY = "schema: ctrlrun.policy/v2\nactions:\n  billing.refund:\n    decision: deny\n"


def test_a_same_size_edit_with_its_mtime_put_back_is_seen(tmp_path, store, monkeypatch):
    policy = tmp_path / "ctrlrun.yaml"
    policy.write_text(RESERVE)
    monkeypatch.setenv("CTRLRUN_CONFIG", str(policy))
    ran = []

    @ctrlrun.protect("billing.refund", store=store)
    def refund(payment_id):
        ran.append(payment_id)

    refund("pi_1")
    assert [r.effect_key for r in store.list_effects()] == ["r:pi_1"]
    before = os.stat(policy)
    edited = DENY.ljust(len(RESERVE) - 1) + "\n"  # the same size
    assert len(edited) == len(RESERVE)
    policy.write_text(edited)
    os.utime(policy, ns=(before.st_atime_ns, before.st_mtime_ns))  # the mtime put back
    assert os.stat(policy).st_mtime_ns == before.st_mtime_ns
    with pytest.raises(ActionDenied):
        refund("pi_2")
    assert ran == ["pi_1"]


def test_the_default_file_and_the_variable_are_looked_up_on_every_call(
    tmp_path, store, monkeypatch
):
    """``./ctrlrun.yaml`` appearing, ``CTRLRUN_CONFIG`` set and unset through ``os.environ``,
    and a directory named ``ctrlrun.yaml`` (not a policy: ignored, as no file) are all seen by
    the very next call."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CTRLRUN_CONFIG", raising=False)
    ran = []

    @ctrlrun.protect("billing.refund", store=store)
    def refund(payment_id):
        ran.append(payment_id)

    refund("pi_1")  # no policy, no template: unreserved
    assert store.list_effects() == []
    (tmp_path / "ctrlrun.yaml").write_text(RESERVE)
    refund("pi_2")
    assert [r.effect_key for r in store.list_effects()] == ["r:pi_2"]
    elsewhere = tmp_path / "deny.yaml"
    elsewhere.write_text(DENY)
    os.environ["CTRLRUN_CONFIG"] = str(elsewhere)
    try:
        with pytest.raises(ActionDenied):
            refund("pi_3")
    finally:
        del os.environ["CTRLRUN_CONFIG"]
    refund("pi_4")
    (tmp_path / "ctrlrun.yaml").unlink()
    (tmp_path / "ctrlrun.yaml").mkdir()
    refund("pi_5")
    assert ran == ["pi_1", "pi_2", "pi_4", "pi_5"]
    assert [r.effect_key for r in store.list_effects()] == ["r:pi_2", "r:pi_4"]


@pytest.mark.parametrize("how", ["os.environ", "patch.dict", "a plain dict"])
def test_ctrlrun_config_is_seen_however_the_environment_is_changed(
    tmp_path, store, monkeypatch, how
):
    """``CTRLRUN_CONFIG`` set through ``os.environ``, ``mock.patch.dict`` or with
    ``os.environ`` replaced by a plain dict (as some test suites do) names the policy in force;
    a file it names that is not there is a ``PolicyError``, never no policy."""
    from unittest import mock

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CTRLRUN_CONFIG", raising=False)
    deny = tmp_path / "deny.yaml"
    deny.write_text(DENY)
    ran = []

    @ctrlrun.protect("billing.refund", effect="r:{payment_id}", store=store)
    def refund(payment_id):
        ran.append(payment_id)

    def environment(value):
        if how == "os.environ":
            monkeypatch.setenv("CTRLRUN_CONFIG", value)
            return mock.patch.dict({})  # nothing more to patch
        if how == "patch.dict":
            return mock.patch.dict(os.environ, {"CTRLRUN_CONFIG": value})
        return mock.patch("os.environ", {**os.environ, "CTRLRUN_CONFIG": value})

    with environment(str(deny)):
        with pytest.raises(ActionDenied):
            refund("pi_1")
    monkeypatch.delenv("CTRLRUN_CONFIG", raising=False)
    with environment(str(tmp_path / "missing.yaml")):
        with pytest.raises(ctrlrun.PolicyError, match="does not exist"):
            refund("pi_2")
    monkeypatch.delenv("CTRLRUN_CONFIG", raising=False)
    refund("pi_3")  # no policy: the decorator's template
    assert ran == ["pi_3"]


def test_a_ctrlrun_config_file_that_cannot_be_looked_at_is_a_policy_error(
    tmp_path, store, monkeypatch
):
    """Not only a missing file: a path through a file (``NotADirectoryError``) refuses the
    call with a ``PolicyError`` naming it, never a raw ``OSError``, never no policy."""
    (tmp_path / "a-file").write_text("x")
    monkeypatch.setenv("CTRLRUN_CONFIG", str(tmp_path / "a-file" / "ctrlrun.yaml"))
    ran = []

    @ctrlrun.protect("billing.refund", effect="r:{payment_id}", store=store)
    def refund(payment_id):
        ran.append(payment_id)

    with pytest.raises(ctrlrun.PolicyError, match="cannot read the policy file CTRLRUN_CONFIG"):
        refund("pi_1")
    assert ran == [] and store.list_effects() == []

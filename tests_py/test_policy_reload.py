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

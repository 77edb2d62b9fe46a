"""Argument fingerprints through the decorator, on both backends and in both modes: the same key
proposed with other arguments, or by another action, is an ``EffectConflict`` naming what
differs (never the values); the row names its action and holder."""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass

import pytest

from ctrlrun import DuplicateEffect, EffectConflict


def emails(mode, store, runs, **options):
    @mode.protect("mail.send", effect="email:{msg_id}", store=store, **options)
    def send(msg_id: str, to: str, body: str = "hi", request_id: str = "r0") -> str:
        runs.append((msg_id, to))
        return "sent"

    return send


def test_the_same_arguments_are_a_plain_duplicate(mode, store):
    runs: list = []
    send = emails(mode, store, runs)
    assert mode.call(send, "m1", "alice@example.com") == "sent"
    with pytest.raises(DuplicateEffect) as info:
        mode.call(send, "m1", "alice@example.com", body="hi")  # a default given explicitly
    assert type(info.value) is DuplicateEffect and info.value.state == "committed"
    assert runs == [("m1", "alice@example.com")]


def test_other_arguments_are_a_conflict_naming_the_fields_never_the_values(mode, store):
    runs: list = []
    send = emails(mode, store, runs)
    mode.call(send, "m2", "alice@example.com")
    with pytest.raises(EffectConflict) as info:
        mode.call(send, "m2", "bob@example.com", body="hello")
    err = info.value
    assert isinstance(err, DuplicateEffect) and err.state == "committed"
    assert err.fields == ("body", "to") and err.other_action is None
    assert "'body'" in str(err) and "'to'" in str(err)
    assert "bob@example.com" not in str(err) and "hello" not in str(err)
    assert err.record.arg_digests.keys() == {"msg_id", "to", "body", "request_id"}
    assert runs == [("m2", "alice@example.com")]


def test_an_excluded_argument_does_not_count(mode, store):
    runs: list = []
    send = emails(mode, store, runs, fingerprint_exclude=("request_id",))
    mode.call(send, "m3", "alice@example.com", request_id="r1")
    with pytest.raises(DuplicateEffect) as info:
        mode.call(send, "m3", "alice@example.com", request_id="r2")
    assert type(info.value) is DuplicateEffect
    assert "request_id" not in store.get_effect("email:m3").arg_digests


class Opaque:
    """A type with no canonical form: left out of the fingerprint."""


@dataclass
class Address:
    street: str
    city: str


def test_unfingerprintable_arguments_are_left_out_and_dataclasses_count(mode, store):
    runs: list = []

    @mode.protect("ship.send", effect="parcel:{parcel_id}", store=store)
    def ship(parcel_id: str, to: Address, handle: object) -> str:
        runs.append(parcel_id)
        return "shipped"

    mode.call(ship, "p1", Address("1 Main St", "Springfield"), Opaque())
    with pytest.raises(DuplicateEffect) as same:
        mode.call(ship, "p1", Address("1 Main St", "Springfield"), Opaque())
    assert type(same.value) is DuplicateEffect
    with pytest.raises(EffectConflict) as moved:
        mode.call(ship, "p1", Address("2 Side St", "Springfield"), Opaque())
    assert moved.value.fields == ("to",)
    assert set(store.get_effect("parcel:p1").arg_digests) == {"parcel_id", "to"}
    assert runs == ["p1"]


def test_another_action_on_a_held_key_is_a_conflict_naming_the_holder(mode, store):
    entered, release = [], []

    @mode.protect("deploy.app", effect="deploy:{env}", store=store)
    async def deploy(env: str) -> str:
        entered.append(env)
        # while this holds the key, another action proposes it
        with pytest.raises(EffectConflict) as info:
            await mode.awaitable(mode.call(rollback, env) if not mode.is_async else rollback(env))
        release.append(info.value)
        return "deployed"

    @mode.protect("deploy.rollback", effect="deploy:{env}", store=store)
    def rollback(env: str) -> str:
        raise AssertionError("never runs: the key is held")

    assert mode.call(deploy, "prod") == "deployed"
    (err,) = release
    assert err.state == "in_progress" and err.other_action == "deploy.app"
    assert str(err) == (
        "effect 'deploy:prod' is in progress (attempt 1) under the action "
        "'deploy.app', and another action proposes the same key: a conflict; "
        "refusing it"
    )


def test_the_row_names_its_action_and_holder(mode, store, tmp_path):
    send = emails(mode, store, [])
    mode.call(send, "m4", "alice@example.com")
    row = store.get_effect("email:m4")
    assert row.action == "mail.send"
    host, pid = row.holder.rsplit(":", 1)
    assert int(pid) == os.getpid() and host == socket.gethostname()
    assert row.args_digest.startswith("sha256:") and len(row.args_digest) == 71


def test_the_store_api_keeps_working_without_fingerprints(store):
    aid = "act_" + uuid.uuid4().hex
    grant = store.reserve_effect("api:1", aid, 60)
    assert grant.record.action is None and grant.record.args_digest is None
    assert grant.record.arg_digests == {} and grant.record.holder is not None

"""Names compared as people mean them: another spelling of who asked ("Refund-Agent", a space
at the end, the fullwidth form) cannot grant the request, another spelling of an approver is no
second approver, and no two accounts are one person; a name holding a control, bidirectional or
invisible character is refused wherever it is declared (an account, a principal, ``--by``), and
nothing is written. Every case on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import re

import pytest

import ctrlrun
from ctrlrun import ApprovalRequired, InvalidArgument
from ctrlrun.store.approvals import ApprovalState
from tests_py.support import policy_files
from tests_py.support.cli import assert_one_line_error, run_cli

#: Another spelling of "refund-agent": its case, a space after it, its fullwidth form (NFKC).
SPELLINGS = ("Refund-Agent", "refund-agent ", "ｒｅｆｕｎｄ－ａｇｅｎｔ")

#: A name holding a bidirectional override, a zero-width space, a bell, by the code point a
#: refusal names.
BAD = {"U+202E": "bob\u202e-evil", "U+200B": "b\u200bob", "U+0007": "bob\x07"}


def ask(store, ref: str, requested_by: str = "refund-agent") -> str:
    """A real protected call that asks for approval; its request id."""

    @ctrlrun.protect(
        "acme.refund",
        effect="refund:{ref}",
        store=store,
        decision="approve",
        requested_by=requested_by,
    )
    def refund(ref: str) -> str:
        return ref

    with pytest.raises(ApprovalRequired) as info:
        refund(ref)
    return info.value.request_id


def unchanged(store, rid: str, key: str, granted_by: tuple = ()) -> None:
    """The request is as it was: pending, with those grants and no new receipt."""
    r = store.get_approval(rid)
    assert (r.state, r.granted_by) == (ApprovalState.PENDING, granted_by)
    kinds = [x.kind for x in store.list_receipts(key)]
    assert kinds == ["requested"] + ["granted in part"] * len(granted_by), kinds


@pytest.mark.parametrize("by", SPELLINGS)
def test_who_asked_cannot_grant_by_another_spelling(store, store_url, by):
    rid = ask(store, "r1")
    with pytest.raises(InvalidArgument, match=r'the same name as "refund-agent".*cannot grant it'):
        store.grant_approval(rid, by=by)
    unchanged(store, rid, "refund:r1")
    proc = run_cli("approve", rid, "--by", by, "--store", store_url)
    assert_one_line_error(proc, "cannot grant it", "nothing was written")
    unchanged(store, rid, "refund:r1")
    granted = store.grant_approval(rid, by="alice")  # another person may
    assert granted.state is ApprovalState.GRANTED


def test_another_spelling_of_an_approver_is_no_second_approver(
    store, store_url, tmp_path, monkeypatch
):
    policy_files.use(tmp_path, monkeypatch, policy_files.TWO_APPROVERS)

    @ctrlrun.protect("acme.wire", store=store, requested_by="wire-agent")
    def wire(ref: str) -> str:
        return ref

    with pytest.raises(ApprovalRequired) as info:
        wire("w1")
    rid = info.value.request_id
    store.grant_approval(rid, by="alice")
    for by in ("ALICE ", "Alice", "ａｌｉｃｅ"):
        with pytest.raises(InvalidArgument, match=r'the same name as "alice".*already granted'):
            store.grant_approval(rid, by=by)
        unchanged(store, rid, "wire:w1", ("alice",))
    proc = run_cli("approve", rid, "--by", "ALICE ", "--store", store_url)
    assert_one_line_error(proc, "already granted", "(1 so far)")
    unchanged(store, rid, "wire:w1", ("alice",))
    with pytest.raises(ApprovalRequired):  # one grant of two: still nothing runs
        wire("w1")
    full = store.grant_approval(rid, by="Bob")
    assert (full.state, full.granted_by) == (ApprovalState.GRANTED, ("alice", "Bob"))


def test_no_two_accounts_are_one_person(store, store_url):
    store.add_approver("alice", "scrypt$1")
    for twin in ("Alice", "ALICE", "ａｌｉｃｅ"):
        with pytest.raises(InvalidArgument, match=r'"alice" already exists.*same name'):
            store.add_approver(twin, "scrypt$2")
    proc = run_cli("approvers", "add", "Alice", "--store", store_url)
    assert_one_line_error(proc, '"alice" already exists', "same name")
    assert [a.name for a in store.list_approvers()] == ["alice"]


@pytest.mark.parametrize("code", sorted(BAD))
def test_a_bad_account_name_is_refused_and_writes_nothing(store, store_url, tmp_path, code):
    name = BAD[code]
    with pytest.raises(InvalidArgument, match=re.escape(code)) as info:
        store.add_approver(name, "scrypt$1")
    assert name not in str(info.value)  # by its code point, never raw
    proc = run_cli("approvers", "add", name, "--store", store_url)
    line = assert_one_line_error(proc, code, "an approver's name")
    assert name not in line
    assert store.list_approvers() == []
    # a store that did not exist is not created for a refused name
    fresh = tmp_path / "fresh.db"
    proc = run_cli("approvers", "add", name, "--store", f"sqlite:///{fresh}")
    assert_one_line_error(proc, code)
    assert not fresh.exists()


@pytest.mark.parametrize("code", sorted(BAD))
def test_a_bad_principal_is_refused_where_it_is_declared(store, tmp_path, code):
    name = BAD[code]
    with pytest.raises(
        InvalidArgument, match=rf"protect\('acme.refund'\): requested_by .*{re.escape(code)}"
    ):
        ctrlrun.protect("acme.refund", effect="r:{a}", store=store, requested_by=name)
    with pytest.raises(InvalidArgument, match=r"U\+D800 \(a lone surrogate\)"):
        ctrlrun.protect("acme.refund", effect="r:{a}", store=store, requested_by="bob\ud800")
    proc = run_cli("gateway", "--name", "shop", "--requested-by", name, "--", "true", cwd=tmp_path)
    line = assert_one_line_error(proc, "--requested-by", code)
    assert name not in line
    assert store.list_approvals() == []
    assert not os.path.exists(os.environ["CTRLRUN_STATE"])  # no default store was made


@pytest.mark.parametrize("code", sorted(BAD))
def test_a_bad_decider_is_refused_and_writes_nothing(store, store_url, code):
    name = BAD[code]
    rid = ask(store, "r2")
    for grant in (store.grant_approval, store.deny_approval):
        with pytest.raises(InvalidArgument, match=rf"the decider \(--by\) .*{re.escape(code)}"):
            grant(rid, by=name)
    for verb in ("approve", "deny"):
        proc = run_cli(verb, rid, "--by", name, "--store", store_url)
        line = assert_one_line_error(proc, code, "nothing was written")
        assert name not in line
    unchanged(store, rid, "refund:r2")

"""What ``ctrlrun approvals list`` shows a person: with ``--json`` every field of each request;
as a table who asked, the approvals so far of those needed, who decided and when it expires,
arguments never cut without saying so; ``--state``, ``--prefix``, ``--action``,
``--requested-by`` and ``--limit`` combine.
Real CLI runs on both backends."""

from __future__ import annotations

import dataclasses
import json
from datetime import timezone

import pytest

import ctrlrun
from ctrlrun import ApprovalRequired
from ctrlrun.store.approvals import ApprovalRecord
from tests_py.support import policy_files
from tests_py.support.cli import run_cli


def cli(store_url: str, *args: str) -> str:
    proc = run_cli("approvals", "list", *args, "--store", store_url)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def asks(store, tmp_path, monkeypatch):
    """Three real requests: a wire (two approvers, one granted), a refund with a long memo,
    a refund denied."""
    policy_files.use(tmp_path, monkeypatch, policy_files.TWO_APPROVERS)

    @ctrlrun.protect("acme.wire", store=store, requested_by="wire-agent")
    def wire(ref: str) -> str:
        return ref

    @ctrlrun.protect("acme.refund", effect="refund:{ref}", decision="approve", store=store)
    def refund(ref: str, memo: str) -> str:
        return ref

    ids = []
    for call, args in ((wire, ("w1",)), (refund, ("r1", "m" * 150 + "END")), (refund, ("r2", "x"))):
        with pytest.raises(ApprovalRequired) as info:
            call(*args)
        ids.append(info.value.request_id)
    store.grant_approval(ids[0], by="alice")
    store.deny_approval(ids[2], by="bob")
    return ids


def test_json_prints_every_field(store, store_url, tmp_path, monkeypatch):
    wire_id, _, _ = asks(store, tmp_path, monkeypatch)
    listed = json.loads(cli(store_url, "--json"))
    fields = {f.name for f in dataclasses.fields(ApprovalRecord)}
    assert [set(item) for item in listed] == [fields] * 3
    first = listed[0]
    record = store.get_approval(wire_id)
    assert first["request_id"] == wire_id
    assert (first["requested_by"], first["approvals_needed"], first["granted_by"]) == (
        "wire-agent",
        2,
        ["alice"],
    )
    assert first["state"] == "pending" and first["decided_by"] == "alice"
    assert first["ttl"] == record.ttl.total_seconds()
    assert first["args_digest"] == record.args_digest
    assert first["expires_at"] == record.expires_at.isoformat().replace("+00:00", "Z")


def test_the_table_shows_who_asked_the_approvals_so_far_and_the_expiry(
    store, store_url, tmp_path, monkeypatch
):
    wire_id, refund_id, denied_id = asks(store, tmp_path, monkeypatch)
    lines = cli(store_url).splitlines()
    columns = [c.strip() for c in lines[0].split("  ") if c.strip()]
    assert columns[-4:] == ["REQUESTED BY", "APPROVALS", "DECIDED BY", "EXPIRES"]
    wire, refund, denied = lines[1:]
    expires = store.get_approval(wire_id).expires_at.astimezone(timezone.utc)
    assert "wire-agent" in wire and " 1/2 " in wire and " alice " in wire
    assert wire.endswith(expires.strftime("%Y-%m-%d %H:%M:%SZ"))
    assert refund.startswith(refund_id) and " 0/1 " in refund
    assert denied.startswith(denied_id) and "denied" in denied and " bob " in denied


def test_a_long_argument_is_cut_with_a_mark_never_silently(store, store_url, tmp_path, monkeypatch):
    asks(store, tmp_path, monkeypatch)
    refund = cli(store_url).splitlines()[2]
    memo = json.dumps({"memo": "m" * 150 + "END", "ref": "r1"})
    assert "END" not in refund  # cut ...
    cut = refund[refund.index('{"memo"') :]
    head, _, rest = cut.partition("… [")
    assert memo.startswith(head)
    left_out = len(memo) - len(head)
    assert rest.startswith(f"{left_out} more characters; --json shows them]")  # ... and says so
    assert json.loads(cli(store_url, "--json"))[1]["arguments"]["memo"].endswith("END")


def test_state_prefix_action_asker_and_limit_combine(store, store_url, tmp_path, monkeypatch):
    wire_id, refund_id, denied_id = asks(store, tmp_path, monkeypatch)

    def ids(*args: str) -> list:
        return [r["request_id"] for r in json.loads(cli(store_url, *args, "--json"))]

    assert ids() == [wire_id, refund_id, denied_id]
    assert ids("--action", "acme.refund") == [refund_id, denied_id]
    assert ids("--action", "acme.refund", "--limit", "1") == [refund_id]
    assert ids("--action", "acme.refund", "--state", "denied") == [denied_id]
    assert ids("--limit", "2") == [wire_id, refund_id]
    assert ids("--action", "acme.nothing") == []
    assert ids("--prefix", "refund:") == [refund_id, denied_id]
    assert ids("--prefix", "refund:r2") == [denied_id]
    assert ids("--requested-by", "wire-agent") == [wire_id]
    assert ids("--requested-by", "wire-agent", "--prefix", "refund:") == []
    table = cli(store_url, "--action", "acme.refund", "--limit", "1").splitlines()
    assert len(table) == 2 and table[1].startswith(refund_id)
    none = cli(store_url, "--state", "used", "--action", "acme.wire").strip()
    assert none.startswith("no approval requests in state used of action 'acme.wire' in ")
    none = cli(store_url, "--requested-by", "nobody", "--prefix", "x:").strip()
    assert none.startswith("no approval requests with key prefix 'x:' asked by 'nobody' in ")
    refused = run_cli("approvals", "list", "--limit", "0", "--store", store_url)
    assert refused.returncode == 2 and "--limit" in refused.stderr


def test_a_store_url_without_a_user_is_shown_without_a_stray_at():
    url = "postgresql://127.0.0.1:1/ctrlrun?schema=s1&timeout=2"
    proc = run_cli("approvals", "list", "--store", url)
    assert proc.returncode == 2, proc.stdout
    assert "postgresql://127.0.0.1:1/ctrlrun?schema=s1" in proc.stderr, proc.stderr
    assert "://@" not in proc.stderr and "  " not in proc.stderr, proc.stderr


def test_a_missing_or_settled_key_is_named_without_an_internal_function(store, store_url):
    missing = run_cli("resolve", "nope:1", "--committed", "--store", store_url)
    assert missing.returncode == 2
    assert "no effect is recorded under key 'nope:1'" in missing.stderr, missing.stderr
    store.reserve_effect("done:1", "act_x", lease=60)
    store.begin_execution("done:1", "act_x")
    store.commit_effect("done:1", "act_x", {"ok": True})
    settled = run_cli("resolve", "done:1", "--failed", "--store", store_url)
    assert settled.returncode == 2
    assert "effect 'done:1' cannot be resolved: it is committed" in settled.stderr
    for shown in (missing.stderr, settled.stderr):
        assert "resolve_effect" not in shown and "  " not in shown, shown

"""Through ``ctrlrun gateway`` in its own process: an approval request and an upstream call
left ambiguous are told by the gateway's process (the async runner's hooks)."""

from __future__ import annotations

from tests_py.support.gateway_rig import Rig


def test_the_gateway_tells_of_a_request_and_an_ambiguous_call(tmp_path, store_url, receiver, here):
    policy = f"""\
schema: ctrlrun.policy/v2
console_url: https://console.example:8780
notify:
  - {{url: "{receiver.url()}", format: json, secret_env: NOTIFY_TEST_SECRET}}
actions:
  mcp.acme.refund:
    effect: "refund:{{payment_id}}"
    decision: approve
  mcp.acme.flaky:
    effect: "flaky:{{payment_id}}"
"""
    rig = Rig(tmp_path, store_url, policy)
    asked, failed = rig.calls(
        ("refund", {"payment_id": "p1", "amount": 5}), ("flaky", {"payment_id": "p2"})
    )
    assert asked.is_error and failed.is_error
    got = receiver.wait_for(2, timeout=15)
    events = sorted((g.json["event"], g.json["action"], g.json["effect_key"]) for g in got)
    assert events == [
        ("approval.requested", "mcp.acme.refund", "refund:p1"),
        ("effect.ambiguous", "mcp.acme.flaky", "flaky:p2"),
    ]
    assert not any('"amount"' in g.body.decode() for g in got)  # no argument value

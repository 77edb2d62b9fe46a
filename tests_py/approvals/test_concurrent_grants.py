"""Concurrent decisions never lose one (issue 45, item 4): approvers granting one request at once
are each recorded on the request, in its receipts and in its count, on both backends; none is
told "recorded" without being there."""

from __future__ import annotations

import threading
from datetime import timedelta

import ctrlrun
from ctrlrun.call.approval import ask

N = 8


def test_eight_approvers_granting_at_once_are_all_recorded(store_url):
    first = ctrlrun.open_store(store_url)
    request = ask(
        first,
        "acme.wire",
        "wire:w1",
        "digest-w1",
        {"to": "acme", "amount": 10_000},
        timedelta(hours=1),
        requested_by="agent",
        approvals_needed=N,
    )
    stores = [ctrlrun.open_store(store_url) for _ in range(N)]
    start = threading.Barrier(N)
    told: list = []
    errors: list = []

    def grant(i: int) -> None:
        start.wait()
        try:
            stores[i].grant_approval(request.request_id, by=f"approver-{i}")
            told.append(f"approver-{i}")
        except ctrlrun.CTRLRunError as exc:  # refused is allowed; recorded-but-lost is not
            errors.append(exc)

    threads = [threading.Thread(target=grant, args=(i,)) for i in range(N)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert errors == [] and len(told) == N  # all were recorded (none refused)
        row = first.get_approval(request.request_id)
        assert row.state.value == "granted"
        assert sorted(row.granted_by) == sorted(told)
        granted = [
            r.actor
            for r in first.list_receipts("wire:w1")
            if r.chain == "approval" and r.kind in ("granted", "granted in part")
        ]
        assert sorted(granted) == sorted(told)
        assert first.verify_receipts().ok
    finally:
        for s in [first, *stores]:
            s.close()

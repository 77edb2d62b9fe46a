"""``ctrlrun demo``: a small refund agent against a real SQLite file."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from typing import Callable, Dict, Optional

from ctrlrun.call.protect import protect
from ctrlrun.cli.table import table
from ctrlrun.errors import AmbiguousEffect, ApprovalRequired, DuplicateEffect, NotExecuted
from ctrlrun.store.api import Store, open_store


class FakeProvider:
    """Stands in for a payment provider: it counts refunds and can fail in two ways."""

    def __init__(self) -> None:
        self.refunds: Dict[str, int] = {}
        self.down = False
        self.times_out = False

    def refund(self, payment_id: str, amount: int) -> Dict[str, object]:
        if self.down:
            raise ConnectionRefusedError("provider unreachable: the request was never sent")
        self.refunds[payment_id] = self.refunds.get(payment_id, 0) + 1
        if self.times_out:
            raise TimeoutError("no reply within 10 s after the request was sent")
        return {"refund_id": f"re_{payment_id[3:]}_{self.refunds[payment_id]}", "amount": amount}


def run(store_url: Optional[str] = None, echo: Callable[[str], None] = print) -> Store:
    """Run the demo; returns the store it used."""
    if store_url is None:
        folder = tempfile.mkdtemp(prefix="ctrlrun-demo-")
        store_url = "sqlite:///" + os.path.join(folder, "state.db")
    store = open_store(store_url)
    provider = FakeProvider()

    @protect("stripe.refund", effect="refund:{payment_id}", store=store)
    def refund(payment_id: str, amount: int) -> Dict[str, object]:
        try:
            return provider.refund(payment_id, amount)
        except ConnectionRefusedError as exc:
            # Provably nothing reached the provider: say so, and a retry may run.
            raise NotExecuted(str(exc)) from exc

    def call(label: str, payment_id: str) -> None:
        try:
            result = refund(payment_id, 2500)
            rec = store.get_effect(f"refund:{payment_id}")
            assert rec is not None
            echo(f"   {label}: refunded -> {result}  (attempt {rec.attempt}, {rec.action_id})")
        except DuplicateEffect as exc:
            echo(f"   {label}: refused, DuplicateEffect(state={exc.state!r})")
        except AmbiguousEffect as exc:
            echo(f"   {label}: refused, AmbiguousEffect(held by {exc.action_id})")
        except NotExecuted as exc:
            echo(f"   {label}: NotExecuted ({exc}) -> the effect is failed; a retry may run")
        except TimeoutError as exc:
            echo(f"   {label}: TimeoutError ({exc}) -> the effect is ambiguous")

    echo(f"ctrlrun demo: a refund agent against {store.url}\n")

    echo("1. The agent calls refund('pi_1001') three times (a retry loop gone wrong).")
    for i in (1, 2, 3):
        call(f"call {i}", "pi_1001")
    echo(f"   the provider saw {provider.refunds.get('pi_1001', 0)} refund for pi_1001\n")

    for title, fault, retry, pid in (
        ("2. The provider is unreachable: the executor raises NotExecuted, then the retry runs.",
         "down", "call 2", "pi_1002"),
        ("3. The provider times out after the request was sent: did the refund happen?",
         "times_out", "blind retry", "pi_1003"),
    ):  # fmt: skip
        echo(title)
        setattr(provider, fault, True)
        call("call 1", pid)
        setattr(provider, fault, False)
        call(retry, pid)
        echo(f"   the provider saw {provider.refunds.get(pid, 0)} refund for {pid}\n")

    echo("4. A person checks the provider's dashboard, finds the refund, and resolves it.")
    rec = store.resolve_effect("refund:pi_1003", "committed", "ops:alice")
    echo(f"   resolve_effect('refund:pi_1003', 'committed', 'ops:alice') -> {rec.state.value}")
    call("retry", "pi_1003")
    echo("")

    approval_scene(store, store_url, provider, echo)

    echo("6. Every write left a receipt, chained per key; a changed or missing one would show.")
    check = store.verify_receipts()
    verdict = "intact" if check.ok else f"BROKEN: {check.reason}"
    echo(f"   verify_receipts() -> {check.receipts} receipts in {check.chains} chains, {verdict}\n")

    echo("7. What the store holds:")
    for row in table(store.list_effects()).splitlines():
        echo("   " + row)
    total = sum(provider.refunds.values())
    echo(f"\n{total} refunds reached the provider for 4 payments: never twice.")
    echo(
        "See it in the console: ctrlrun approvers add alice, then ctrlrun console (both with "
        "--store and this store's URL; pip install '.[console]')."
    )
    return store


def approval_scene(
    store: Store, store_url: str, provider: FakeProvider, echo: Callable[[str], None]
) -> None:
    """A refund that needs a person's approval: asked, granted by the person with the CLI (in
    its own process, as a person would, the store's URL in its environment, never on its
    command line), then run once."""

    @protect("stripe.refund_large", effect="refund:{payment_id}", store=store, decision="approve")
    def refund_large(payment_id: str, amount: int) -> Dict[str, object]:
        return provider.refund(payment_id, amount)

    echo("5. A large refund needs a person's approval first.")
    try:
        refund_large("pi_2001", 250000)
    except ApprovalRequired as exc:
        request = str(exc.request_id)  # always set when the decorator raises it
        echo(f"   call 1: ApprovalRequired: request {request} is pending; nothing ran")
        person = subprocess.run(
            [sys.executable, "-m", "ctrlrun", "approve", request, "--by", "ops:bob"],
            env=dict(os.environ, CTRLRUN_STORE=store_url),
            capture_output=True,
            text=True,
            timeout=120,
        )
        said = (person.stdout or person.stderr).strip()
        echo(f"   the person: $ ctrlrun approve {request} --by ops:bob\n     {said}")
    result = refund_large("pi_2001", 250000)
    echo(f"   call 2: refunded -> {result}")
    echo(f"   the provider saw {provider.refunds.get('pi_2001', 0)} refund for pi_2001\n")

"""A refund agent whose refund tool runs at most once per payment.

The payment provider is a small fake that keeps count, so the script can check at the end that no
payment was refunded twice. It walks through the cases an agent meets in practice:

* the model asks for the same refund twice (``DuplicateEffect``, state ``committed``);
* the provider is unreachable, so provably nothing happened (``NotExecuted``: a retry may run);
* the provider times out after the request was sent (the effect becomes ``ambiguous``), and a
  person checks the provider and settles it with ``resolve_effect``.

Run it with ``python examples/refund_agent.py``; it writes to a temporary SQLite store.
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple, TypedDict

import ctrlrun


class Receipt(TypedDict):
    refund_id: str
    payment_id: str
    amount_cents: int


class ProviderUnreachable(Exception):
    """The request never left this machine."""


class ProviderTimeout(Exception):
    """The request was sent, and no reply came back."""


@dataclass
class FakeProvider:
    """Stands in for a payment API (Stripe, Adyen, ...)."""

    refunds: Dict[str, int] = field(default_factory=dict)  # payment id -> refunds made
    by_key: Dict[str, Receipt] = field(default_factory=dict)  # its own idempotency keys
    next_failure: Optional[str] = None  # "unreachable" or "timeout", for one call

    def create_refund(self, payment_id: str, amount_cents: int, idempotency_key: str) -> Receipt:
        failure, self.next_failure = self.next_failure, None
        if failure == "unreachable":
            raise ProviderUnreachable("connection refused by api.provider.test")
        if idempotency_key in self.by_key:  # a replayed request: the same answer, no new refund
            return self.by_key[idempotency_key]
        self.refunds[payment_id] = self.refunds.get(payment_id, 0) + 1
        receipt: Receipt = {"refund_id": f"re_{payment_id}", "payment_id": payment_id,
                            "amount_cents": amount_cents}
        self.by_key[idempotency_key] = receipt
        if failure == "timeout":
            raise ProviderTimeout("no reply within 30 s; the request had been sent")
        return receipt


# The protected tool keeps the executor's signature: ``protect`` returns the same function type.
RefundTool = Callable[[str, int], Receipt]


def make_refund_tool(store: ctrlrun.Store, provider: FakeProvider) -> RefundTool:
    @ctrlrun.protect("payments.refund", effect="refund:{payment_id}", lease=120, store=store)
    def refund(payment_id: str, amount_cents: int) -> Receipt:
        try:
            return provider.create_refund(
                payment_id, amount_cents, idempotency_key=ctrlrun.idempotency_token()
            )
        except ProviderUnreachable as exc:
            # Nothing reached the provider: say so, and the next call may run as attempt 2.
            raise ctrlrun.NotExecuted(str(exc)) from exc

    return refund


def agent_step(refund: RefundTool, payment_id: str, amount_cents: int) -> str:
    """What the agent loop tells the model after one tool call."""
    try:
        receipt = refund(payment_id, amount_cents)
    except ctrlrun.DuplicateEffect as exc:
        if exc.state == "committed" and exc.record is not None:
            if exc.record.resolved_by is not None:  # settled by a person: no stored result
                return f"already refunded (confirmed by {exc.record.resolved_by})"
            return f"already refunded earlier: {exc.record.result['refund_id']}"
        return "a refund for this payment is in progress elsewhere; do not retry now"
    except ctrlrun.NotExecuted as exc:
        return f"not refunded ({exc}); safe to try again"
    except ctrlrun.AmbiguousEffect as exc:
        return f"outcome unknown (held by {exc.action_id}); a person must check"
    except ProviderTimeout:
        return "the provider did not answer; the refund may or may not have happened"
    return f"refunded: {receipt['refund_id']}"


def main() -> int:
    provider = FakeProvider()
    with tempfile.TemporaryDirectory(prefix="refund-agent-") as folder:
        store = ctrlrun.open_store("sqlite:///" + str(Path(folder) / "state.db"))
        refund = make_refund_tool(store, provider)

        plan: List[Tuple[str, str, int, Optional[str]]] = [
            ("the model asks for a refund", "pi_1001", 2500, None),
            ("the model asks again (a loop)", "pi_1001", 2500, None),
            ("provider unreachable", "pi_1002", 900, "unreachable"),
            ("the agent retries", "pi_1002", 900, None),
            ("provider times out after sending", "pi_1003", 4000, "timeout"),
            ("the agent retries blindly", "pi_1003", 4000, None),
        ]
        for label, payment_id, amount, failure in plan:
            provider.next_failure = failure
            print(f"{label:34} {payment_id}: {agent_step(refund, payment_id, amount)}")

        # A person looks at the provider's dashboard, finds the refund, and settles the key.
        for record in store.list_effects(ctrlrun.EffectState.AMBIGUOUS):
            payment_id = record.effect_key.split(":", 1)[1]
            happened = provider.refunds.get(payment_id, 0) > 0
            settled = store.resolve_effect(
                record.effect_key, "committed" if happened else "failed", "ops:alice"
            )
            print(f"resolved {settled.effect_key} as {settled.state.value} by {settled.resolved_by}")
        print(f"{'the agent retries once more':34} pi_1003: {agent_step(refund, 'pi_1003', 4000)}")

        for record in store.list_effects():
            print(f"  {record.effect_key:16} {record.state.value:10} attempt {record.attempt}")
        store.close()

    twice = [p for p, n in provider.refunds.items() if n != 1]
    assert not twice, f"refunded more than once: {twice}"
    assert sorted(provider.refunds) == ["pi_1001", "pi_1002", "pi_1003"], provider.refunds
    print("every payment was refunded exactly once")
    return 0


if __name__ == "__main__":
    sys.exit(main())

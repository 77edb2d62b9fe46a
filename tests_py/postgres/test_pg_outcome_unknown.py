"""An outcome write whose fate is unknown stays unknown to the caller, through a real TCP proxy
in front of a real PostgreSQL: the outcome's COMMIT lands, its reply is lost, the re-read cannot
connect, and every later try cannot connect either. Those later tries prove nothing about the
first, so the caller's error is ``StoreUnresolved`` (never "nothing was written"), naming the
key and the action id, with the first unknown in its chain. Sync and async executors."""

from __future__ import annotations

import logging

import pytest

from ctrlrun import EffectState, NotExecuted, StoreUnresolved

SENT_NOTHING = "nothing was written, so the write may be retried"


def chain(exc: BaseException) -> list:
    """``exc`` and its causes, outermost first."""
    out = []
    while exc is not None and exc not in out:
        out.append(exc)
        exc = exc.__cause__
    return out


@pytest.mark.parametrize("outcome", ["returns", "raises", "not_executed"])
def test_a_landed_outcome_whose_later_tries_cannot_connect_is_unresolved(
    mode, proxy, proxied, direct, caplog, outcome
):
    caplog.set_level(logging.WARNING, logger="ctrlrun")
    runs: list = []

    @mode.protect("pay", effect="pay:{order}", store=proxied)
    def pay(order: str) -> str:
        runs.append(order)
        if outcome == "raises":
            raise RuntimeError("the provider hung up")
        if outcome == "not_executed":
            raise NotExecuted("refused before sending")
        return "paid"

    rule = proxy.arm("drop_after", b"ctrlrun_transition($1", then_refuse=True)
    with pytest.raises(StoreUnresolved) as info:
        mode.call(pay, "o1")
    assert rule.fired == 1
    assert runs == ["o1"]
    err = info.value
    assert err.effect_key == "pay:o1" and err.action_id.startswith("act_")
    message = str(err)
    assert "the outcome may have been recorded; the body has run" in message
    assert "pay:o1" in message and err.action_id in message
    assert SENT_NOTHING not in message
    # The first unknown try is in the chain: the one whose COMMIT may have landed.
    causes = chain(err)[1:]
    assert causes and isinstance(causes[0], StoreUnresolved)
    assert "may or may not have landed" in str(causes[0])
    assert all(SENT_NOTHING not in str(c) for c in causes)
    # The later tries did run, and met a store they could not reach (the log says so).
    tries = [r.getMessage() for r in caplog.records if "recording" in r.getMessage()]
    assert len(tries) == 4, tries
    assert any(SENT_NOTHING in t for t in tries[1:]), tries
    # What the store really holds: the outcome landed.
    rec = direct.get_effect("pay:o1")
    assert rec.action_id == err.action_id
    expected = {
        "returns": EffectState.COMMITTED,
        "raises": EffectState.AMBIGUOUS,
        "not_executed": EffectState.FAILED,
    }[outcome]
    assert rec.state is expected


def test_an_outcome_write_that_never_reached_the_store_is_still_a_failed_write(
    mode, proxy, proxied, direct
):
    """The other side of the rule: when no try's fate is unknown (every one was refused a
    connection before it sent anything), the error says the outcome was not recorded."""
    runs: list = []

    @mode.protect("pay", effect="pay:{order}", store=proxied)
    def pay(order: str) -> str:
        runs.append(order)
        proxy.refuse_new()
        proxy.drop_all()
        return "paid"

    with pytest.raises(Exception) as info:
        mode.call(pay, "o2")
    assert not isinstance(info.value, StoreUnresolved), info.value
    assert "has already run" in str(info.value)
    assert runs == ["o2"]
    assert direct.get_effect("pay:o2").state is EffectState.EXECUTING

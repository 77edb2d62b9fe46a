"""The console in a real browser, on both backends: a person signs in, sees the request a
protected call in another process is waiting on (without reloading the page), grants or denies
it, and watches the call proceed; settles an ambiguous effect; reads its receipts."""

from __future__ import annotations

import json

from selenium.webdriver.common.by import By

from ctrlrun import EffectState
from tests_py.console.rig import Agent, pending_of, sign_in, text_of, texts, wait_for
from tests_py.support.cli import make_ambiguous


def test_a_grant_in_the_browser_lets_the_waiting_call_run_once(
    browser, console, store_url, tmp_path
):
    sign_in(browser, console, "alice")
    browser.get(console.url + "/approvals")
    assert browser.find_elements(By.ID, "no-pending")
    agent = Agent(tmp_path, store_url, "pi_100", requested_by="agent-7")
    try:
        r = pending_of(console.store, "refund:pi_100")
        # the list updates itself: the request appears without a reload
        row = f'tr[data-request="{r.request_id}"]'
        shown = wait_for(lambda: texts(browser, row), why="the pending row to appear by itself")[0]
        assert "acme.refund" in shown and "refund:pi_100" in shown and "4200" in shown
        assert "customer called" in shown and "not bound" in shown  # trace is excluded
        assert "agent-7" in shown
        browser.get(f"{console.url}/approvals/{r.request_id}")
        assert agent.runs() == [] and agent.proc.poll() is None  # still waiting
        browser.find_element(By.ID, "grant-note").send_keys("checked with the customer")
        browser.find_element(By.ID, "grant").click()
        wait_for(lambda: "You granted this request." in text_of(browser))
        done = agent.finish()
    finally:
        agent.kill()
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"refunded": 4200}
    assert agent.runs() == ["pi_100"]  # exactly once
    effect = console.store.get_effect("refund:pi_100")
    assert effect.state is EffectState.COMMITTED and effect.approval_id == r.request_id
    decided = console.store.get_approval(r.request_id)
    assert decided.state.value == "used" and decided.decided_by == "alice"  # the account
    assert decided.note == "checked with the customer"
    # the detail page follows the request to "used" by itself
    wait_for(lambda: texts(browser, "#state") == ["used"], why="state used")


def test_a_denial_in_the_browser_refuses_the_waiting_call(browser, console, store_url, tmp_path):
    sign_in(browser, console, "bob")
    agent = Agent(tmp_path, store_url, "pi_200")
    try:
        r = pending_of(console.store, "refund:pi_200")
        browser.get(f"{console.url}/approvals/{r.request_id}")
        browser.find_element(By.ID, "deny-note").send_keys("not this one")
        browser.find_element(By.ID, "deny").click()
        wait_for(lambda: "You denied this request." in text_of(browser))
        done = agent.finish()
    finally:
        agent.kill()
    assert done.returncode == 3, done.stderr
    assert json.loads(done.stdout) == {"denied_by": "bob"}
    assert agent.runs() == [] and console.store.get_effect("refund:pi_200") is None
    assert texts(browser, "#state") == ["denied"]
    assert "not this one" in text_of(browser)


def test_an_ambiguous_effect_is_settled_in_the_browser_with_its_receipts(browser, console):
    make_ambiguous(console.store, "charge:older")
    make_ambiguous(console.store, "charge:newer")
    sign_in(browser, console, "alice")
    browser.get(console.url + "/effects")
    rows = browser.find_elements(By.CSS_SELECTOR, "#ambiguous tbody tr")
    assert [r.get_attribute("data-key") for r in rows] == ["charge:older", "charge:newer"]
    assert "provider reset the connection" in rows[0].text  # what is known: the error
    rows[0].find_element(By.TAG_NAME, "a").click()
    wait_for(lambda: browser.find_elements(By.ID, "resolve"))
    assert "This key's receipt chains verify" in browser.find_element(By.ID, "chain").text
    kinds = texts(browser, "#receipts tbody tr")
    assert len(kinds) == 2 and "reservation" in kinds[0] and "outcome ambiguous" in kinds[1]
    browser.find_element(By.ID, "outcome-committed").click()
    browser.find_element(By.ID, "resolve-note").send_keys("the bank shows the charge")
    browser.find_element(By.ID, "resolve").click()
    wait_for(lambda: "You settled this effect." in text_of(browser))
    rec = console.store.get_effect("charge:older")
    assert rec.state is EffectState.COMMITTED and rec.resolved_by == "alice"
    assert texts(browser, "#state") == ["committed"]
    assert "resolution" in texts(browser, "#receipts")[0]
    assert not browser.find_elements(By.ID, "resolve")  # settled: no form any more
    # the list no longer shows it
    browser.get(console.url + "/effects")
    keys = [
        r.get_attribute("data-key")
        for r in browser.find_elements(By.CSS_SELECTOR, "#ambiguous tbody tr")
    ]
    assert keys == ["charge:newer"]


def test_an_action_needing_two_approvers_waits_for_a_second_person(
    browser, console, store_url, tmp_path
):
    (tmp_path / "ctrlrun.yaml").write_text(  # the agent's working directory: its policy
        "schema: ctrlrun.policy/v2\n"
        "actions:\n"
        "  acme.refund:\n"
        "    effect: 'refund:{payment_id}'\n"
        "    decision: approve\n"
        "    approvals: 2\n"
    )
    console.add("carol")
    agent = Agent(tmp_path, store_url, "pi_300", requested_by="agent-9")
    try:
        r = pending_of(console.store, "refund:pi_300")
        assert r.approvals_needed == 2
        sign_in(browser, console, "alice")
        browser.get(f"{console.url}/approvals/{r.request_id}")
        browser.find_element(By.ID, "grant").click()
        wait_for(lambda: "1 of 2: alice" in text_of(browser), why="one grant of two")
        assert texts(browser, "#state") == ["pending"] and agent.runs() == []
        assert not browser.find_elements(By.ID, "grant")  # alice is not offered a second
        assert console.store.get_approval(r.request_id).granted_by == ("alice",)
        assert agent.proc.poll() is None and agent.runs() == []
        sign_in(browser, console, "carol")
        browser.get(f"{console.url}/approvals/{r.request_id}")
        browser.find_element(By.ID, "grant").click()
        done = agent.finish()
    finally:
        agent.kill()
    assert done.returncode == 0, done.stderr
    assert agent.runs() == ["pi_300"]
    used = console.store.get_approval(r.request_id)
    assert used.state.value == "used" and used.granted_by == ("alice", "carol")


def test_a_request_nobody_decided_in_time_is_shown_expired_by_itself(browser, console):
    import ctrlrun

    @ctrlrun.protect(
        "acme.close",
        effect="close:{account}",
        store=console.store,
        decision="approve",
        approval_ttl=2,
    )
    def close(account: str) -> None:
        raise AssertionError("never runs without a grant")

    try:
        close("acct-1")
    except ctrlrun.ApprovalRequired as exc:
        request_id = exc.request_id
    sign_in(browser, console, "alice")
    browser.get(console.url + "/approvals")
    row = f'#pending tr[data-request="{request_id}"]'
    assert texts(browser, row), "pending first"
    # nobody decides: the live list moves it to the recent ones, as expired, without a reload
    gone = f'#recent tr[data-request="{request_id}"] .state'
    assert wait_for(lambda: texts(browser, gone), why="the expired row")[0] == "expired"
    assert not texts(browser, row)
    browser.get(f"{console.url}/approvals/{request_id}")
    assert texts(browser, "#state") == ["expired"]
    assert not browser.find_elements(By.ID, "grant")  # nothing left to decide

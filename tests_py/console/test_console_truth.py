"""What the console shows is what the store holds: bidi, control and invisible characters as
their codes (every field, every page, the live parts too) with a warning; who granted a
request and when; the arguments of the call a person settles and their note apart from the
error; times in the viewer's zone; the page one is on. Read as the browser renders it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from selenium.webdriver.common.by import By

import ctrlrun
from ctrlrun import ApprovalRequired
from ctrlrun.call.approval import ask
from tests_py.console.rig import SECRET, csrf_in, session_client, sign_in, text_of, texts, wait_for

sqlite_only = pytest.mark.parametrize("backend", ["sqlite"])

RLO, PDF, ZWSP, RLI = "\u202e", "\u202c", "\u200b", "\u2067"
IBAN = f"DE8937040044053201{RLO}0003{PDF}"


def request(store, payment_id: str, iban: str, approvals: int = 1) -> str:
    """A pending request of a real protected call (one grant), or of ``approvals`` grants."""
    if approvals > 1:
        args = {"payment_id": payment_id, "iban": iban}
        key = f"refund:{payment_id}"
        return ask(
            store,
            "acme.refund",
            key,
            "d" + payment_id,
            args,
            timedelta(hours=1),
            (),
            None,
            approvals,
        ).request_id

    @ctrlrun.protect("acme.refund", effect="refund:{payment_id}", store=store, decision="approve")
    def refund(payment_id: str, iban: str) -> str:
        return "done"

    with pytest.raises(ApprovalRequired) as info:
        refund(payment_id, iban)
    return info.value.request_id


def raw_in(text: str) -> list:
    """The characters of ``text`` a person could not see or that reorder what they read."""
    return [c for c in text if not c.isprintable() and c != "\n"]


def test_bidi_and_invisible_characters_are_shown_as_codes_with_a_warning(browser, console):
    plain = request(console.store, "pi_plain", "DE00123")
    sign_in(browser, console, "alice")
    browser.get(console.url + "/approvals")
    # a request arriving in the live part of the list: escaped there too
    rid = request(console.store, f"pi_9{RLO}0001", IBAN)
    row = f'#pending tr[data-request="{rid}"]'
    wait_for(lambda: texts(browser, row), why="the new request in the live list")
    body = text_of(browser)
    assert raw_in(body) == [] and "refund:pi_9\\u202e0001" in body
    assert texts(browser, row + " .hidden-chars") == ["hidden characters"]
    assert texts(browser, f'#pending tr[data-request="{plain}"] .hidden-chars') == []

    browser.get(f"{console.url}/approvals/{rid}")
    body = text_of(browser)
    assert raw_in(body) == [] and raw_in(browser.title) == []
    assert '"DE8937040044053201\\u202e0003\\u202c"' in body  # the IBAN as the grant binds it
    assert "refund:pi_9\\u202e0001" in body
    warning = texts(browser, "#hidden-warning")[0]
    assert "control, bidi or invisible characters" in warning
    # the live part of the page: a decision made elsewhere arrives, still escaped
    console.store.deny_approval(rid, "bob", "wrong account")
    wait_for(lambda: texts(browser, "#state") == ["denied"], why="the live denial")
    assert texts(browser, "#note") == ["wrong account"]
    assert texts(browser, "#decided-by")[0].startswith("bob at 20")
    assert raw_in(text_of(browser)) == [] and "refund:pi_9\\u202e0001" in text_of(browser)

    browser.get(f"{console.url}/approvals/{plain}")
    assert not browser.find_elements(By.ID, "hidden-warning")


def test_an_effect_key_and_error_are_shown_as_codes_with_a_warning(browser, console):
    key = f"wire:{RLO}9001"

    @ctrlrun.protect("bank.wire", effect="{k}", store=console.store)
    def boom(k: str) -> None:
        raise ValueError(f"the bank said {RLI}no{ZWSP}")

    with pytest.raises(ValueError):
        boom(key)
    sign_in(browser, console, "alice")
    browser.get(console.url + "/effects")
    assert raw_in(text_of(browser)) == [] and "wire:\\u202e9001" in text_of(browser)
    browser.find_element(By.CSS_SELECTOR, "#ambiguous a").click()
    wait_for(lambda: browser.find_elements(By.ID, "resolve"), why="the effect page")
    assert "control, bidi or invisible characters" in texts(browser, "#hidden-warning")[0]
    assert "the bank said \\u2067no\\u200b" in texts(browser, "#effect-error")[0]
    browser.find_element(By.ID, "outcome-failed").click()
    browser.find_element(By.ID, "resolve-note").send_keys("bank says no transfer")
    browser.find_element(By.ID, "resolve").click()
    wait_for(lambda: "You settled this effect." in text_of(browser), why="the resolution")
    assert texts(browser, "#resolution-note") == ["bank says no transfer"]
    assert raw_in(text_of(browser)) == []
    # the page of an error names the key as codes too
    browser.get(f"{console.url}/effects/nope{RLO}x")
    assert raw_in(text_of(browser)) == [] and "nope\\u202ex" in text_of(browser)
    # signed out, the page of that key is where signing in leads back to
    browser.delete_all_cookies()
    browser.get(f"{console.url}/effects/wire:{RLO}9001")
    browser.find_element(By.ID, "account").send_keys("alice")
    browser.find_element(By.ID, "secret").send_keys(SECRET)
    browser.find_element(By.ID, "signin").click()
    wait_for(lambda: browser.find_elements(By.ID, "resolution"), why="the effect page again")
    assert texts(browser, "h1") == ["Effect wire:\\u202e9001"]


def test_a_partly_granted_request_says_who_granted_when_and_offers_them_no_grant(browser, console):
    rid = request(console.store, "pi_two", "DE00123", approvals=2)
    sign_in(browser, console, "alice")
    browser.get(f"{console.url}/approvals/{rid}")
    browser.find_element(By.ID, "grant").click()
    wait_for(lambda: "Your grant is recorded" in text_of(browser), why="one grant of two")
    line = texts(browser, "#approvals")[0]
    assert line.startswith("1 of 2: alice at 20"), line  # a time, not "alice at"
    assert not browser.find_elements(By.ID, "decided-by")
    assert not browser.find_elements(By.ID, "grant")  # alice cannot grant twice
    assert "waits for 1 more approver." in texts(browser, "#granted-already")[0]
    assert browser.find_elements(By.ID, "deny")
    with session_client(browser, console) as http:  # the store still refuses a forged second
        token = csrf_in(http.get(f"/approvals/{rid}").text)
        r = http.post(f"/approvals/{rid}/grant", data={"csrf": token})
        assert r.status_code == 409 and "already granted" in r.text
    assert console.store.get_approval(rid).granted_by == ("alice",)
    sign_in(browser, console, "bob")
    browser.get(f"{console.url}/approvals/{rid}")
    assert browser.find_elements(By.ID, "grant")  # bob may
    browser.find_element(By.ID, "grant").click()
    wait_for(lambda: "You granted this request." in text_of(browser), why="the second grant")
    line = texts(browser, "#approvals")[0]
    assert line.startswith("2 of 2: alice at 20") and ", bob at 20" in line, line
    assert texts(browser, "#decided-by")[0].startswith("bob at 20")


def test_the_effect_page_shows_the_calls_arguments_and_the_note_beside_the_outcome(
    browser, console
):
    store = console.store

    @ctrlrun.protect("bank.wire", effect="wire:{ref}", store=store, decision="approve")
    def wire(ref: str, iban: str, amount: int) -> None:
        raise ValueError("the bank hung up")

    with pytest.raises(ApprovalRequired) as info:
        wire("w-1", "DE00123", 500)
    store.grant_approval(info.value.request_id, "bob")
    with pytest.raises(ValueError):
        wire("w-1", "DE00123", 500)

    @ctrlrun.protect("bank.ping", effect="ping:{ref}", store=store)
    def ping(ref: str) -> None:
        raise ValueError("no answer")

    with pytest.raises(ValueError):
        ping("p-1")
    sign_in(browser, console, "alice")
    browser.get(console.url + "/effects/wire:w-1")
    args = dict(zip(texts(browser, "dl.args dt"), texts(browser, "dl.args dd")))
    assert args == {"amount": "500", "iban": '"DE00123"', "ref": '"w-1"'}
    assert info.value.request_id in texts(browser, "#arguments-from")[0]
    assert texts(browser, "#chain")[0].startswith("This key's receipt chains verify (2 chains, ")
    browser.find_element(By.ID, "outcome-committed").click()
    browser.find_element(By.ID, "resolve-note").send_keys("seen on the statement")
    browser.find_element(By.ID, "resolve").click()
    wait_for(lambda: "You settled this effect." in text_of(browser), why="the resolution")
    resolution = texts(browser, "#resolution")[0]
    assert resolution.startswith("committed by alice at 20"), resolution
    assert texts(browser, "#resolution-note") == ["seen on the statement"]
    error = texts(browser, "#effect-error")[0]
    assert "the bank hung up" in error and "seen on the statement" not in error
    assert "resolved as" not in error

    browser.get(console.url + "/effects/ping:p-1")
    said = texts(browser, "#no-arguments")[0]
    assert "arguments were not stored, only their digest" in said
    assert store.get_effect("ping:p-1").args_digest in said
    assert not browser.find_elements(By.CSS_SELECTOR, "dl.args")
    assert texts(browser, "#chain") == ["This key's receipt chains verify (1 chain, 2 receipts)."]


@sqlite_only
def test_times_show_in_the_viewers_zone_with_utc_on_hover_and_the_nav_marks_the_page(
    browser, console
):
    rid = request(console.store, "pi_tz", "DE00123")
    made = console.store.get_approval(rid).requested_at
    sign_in(browser, console, "alice")
    browser.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "Asia/Kolkata"})
    try:
        browser.get(f"{console.url}/approvals/{rid}")
        stamp = made.strftime("%Y-%m-%dT%H:%M:%SZ")
        when = browser.find_element(By.CSS_SELECTOR, f'time[datetime="{stamp}"]')
        local = made + timedelta(hours=5, minutes=30)  # India: UTC+5:30, no summer time
        assert when.text.startswith(local.strftime("%Y-%m-%d %H:%M:%S")), when.text
        assert when.get_attribute("title") == made.strftime("%Y-%m-%d %H:%M:%S UTC")
    finally:
        browser.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": ""})
    here = browser.find_elements(By.CSS_SELECTOR, "header nav a[aria-current=page]")
    assert [a.text for a in here] == ["Approvals"]
    browser.get(console.url + "/effects")
    here = browser.find_elements(By.CSS_SELECTOR, "header nav a[aria-current=page]")
    assert [a.text for a in here] == ["Effects"]
    views = browser.find_elements(By.CSS_SELECTOR, "nav.views a[aria-current=page]")
    assert [a.text for a in views] == ["ambiguous"]  # the list's view, marked apart
    other = browser.find_element(By.CSS_SELECTOR, 'nav a[href="/approvals"]')
    assert other.value_of_css_property("color") != here[0].value_of_css_property("color")

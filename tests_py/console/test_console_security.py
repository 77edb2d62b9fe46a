"""What the console refuses or escapes: a forged form (no or a wrong CSRF token, sent with the
session cookie by a plain HTTP client), a signed-out request, a self-approval, HTML and script
in arguments and keys, too many sign-in attempts, a session whose account's secret changed,
and a proxy header from an address not trusted."""

from __future__ import annotations

import json

import httpx2 as httpx
import pytest
from selenium.webdriver.common.by import By

import ctrlrun
from ctrlrun import ApprovalRequired, EffectState
from ctrlrun.console import accounts
from ctrlrun.console.state import Settings, networks
from tests_py.console.rig import (
    SECRET,
    Console,
    csrf_in,
    session_client,
    sign_in,
    small_limiter,
    text_of,
    texts,
    wait_for,
)
from tests_py.support.cli import make_ambiguous

#: What does not depend on the backend runs on SQLite only (the suite stays quick); the
#: forged form, the escaping and the main flow (test_console_flow.py) run on both.
sqlite_only = pytest.mark.parametrize("backend", ["sqlite"])

HOSTILE = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">&amp;'


def ask(store, payment_id: str, memo: str = "hi", **extra):
    """A real protected call that asks for approval (and raises at once: no wait)."""

    @ctrlrun.protect(
        "acme.refund", effect="refund:{payment_id}", store=store, decision="approve", **extra
    )
    def refund(payment_id: str, memo: str) -> str:
        return "done"

    with pytest.raises(ApprovalRequired) as info:
        refund(payment_id, memo)
    return info.value.request_id


def test_a_forged_form_without_the_csrf_token_is_refused_and_writes_nothing(browser, console):
    rid = ask(console.store, "pi_f")
    make_ambiguous(console.store, "charge:f")
    sign_in(browser, console, "alice")
    with session_client(browser, console) as http:
        assert http.get("/approvals").status_code == 200  # the cookie is the session
        for data in ({"note": "x"}, {"note": "x", "csrf": "forged"}, {"csrf": ""}):
            for verb in ("grant", "deny"):
                r = http.post(f"/approvals/{rid}/{verb}", data=data)
                assert r.status_code == 403 and "nothing was done" in r.text
            r = http.post("/effects/charge:f/resolve", data={**data, "outcome": "committed"})
            assert r.status_code == 403
        # the right token, but not as a form: refused too
        token = csrf_in(http.get(f"/approvals/{rid}").text)
        r = http.post(f"/approvals/{rid}/grant", json={"csrf": token})
        assert r.status_code == 403
        r = http.post("/signout", data={"csrf": "forged"})
        assert r.status_code == 403
        assert http.get("/approvals").status_code == 200  # still signed in
    assert console.store.get_approval(rid).state.value == "pending"
    assert console.store.get_effect("charge:f").state is EffectState.AMBIGUOUS


@sqlite_only
def test_a_signed_out_request_is_sent_to_sign_in_and_a_post_is_refused(console):
    rid = ask(console.store, "pi_s")
    with httpx.Client(base_url=console.url) as http:
        r = http.get("/approvals")
        assert r.status_code == 303 and r.headers["location"] == "/signin?next=%2Fapprovals"
        r = http.get(f"/approvals/{rid}")
        assert r.status_code == 303 and r.headers["location"].startswith("/signin?next=")
        assert http.get("/effects", headers={"x-ctrlrun-fragment": "1"}).status_code == 401
        r = http.post(f"/approvals/{rid}/grant", data={"csrf": "x"})
        assert r.status_code == 403
        http.cookies.set("ctrlrun_session", "made-up")
        assert http.post(f"/approvals/{rid}/grant", data={"csrf": "x"}).status_code == 403
        r = http.get("/")
        assert r.status_code == 303 and r.headers["location"] == "/approvals"
        page = http.get("/signin")
        assert "default-src 'none'" in page.headers["content-security-policy"]
        assert page.headers["x-frame-options"] == "DENY"
    assert console.store.get_approval(rid).state.value == "pending"


def test_a_self_approval_is_refused_on_the_page(browser, console):
    rid = ask(console.store, "pi_self", requested_by="alice")
    sign_in(browser, console, "alice")
    browser.get(f"{console.url}/approvals/{rid}")
    browser.find_element(By.ID, "grant").click()
    error = wait_for(lambda: browser.find_elements(By.ID, "error"))[0].text
    assert "alice asked for" in error and "cannot grant it" in error  # the store's refusal
    assert "nothing was written" in error
    assert console.store.get_approval(rid).state.value == "pending"
    sign_in(browser, console, "bob")  # another person may
    browser.get(f"{console.url}/approvals/{rid}")
    browser.find_element(By.ID, "grant").click()
    wait_for(lambda: "You granted this request." in text_of(browser))
    assert console.store.get_approval(rid).decided_by == "bob"


def test_html_in_arguments_and_keys_is_shown_as_text(browser, console):
    rid = ask(console.store, '<b id="inj">x</b>', memo=HOSTILE)
    key = '<img id="inj2" src=x onerror="window.__pwned=3">/a?b=1#c%2F'
    make_ambiguous(console.store, key)
    sign_in(browser, console, "alice")
    for path in ("/approvals", f"/approvals/{rid}", "/effects"):
        browser.get(console.url + path)
        body = text_of(browser)
        assert json.dumps(HOSTILE) in body or path == "/effects", path  # shown as JSON text
        assert browser.execute_script("return window.__pwned") is None
        assert not browser.find_elements(By.ID, "inj") and not browser.find_elements(By.ID, "inj2")
        assert not browser.find_elements(By.CSS_SELECTOR, "main img, main script")
    assert key in text_of(browser)
    # the key's own page, reached by its link (every character of the key kept), settles it
    browser.find_element(By.CSS_SELECTOR, "#ambiguous tbody a").click()
    wait_for(lambda: browser.find_elements(By.ID, "resolve"))
    assert key in browser.find_element(By.TAG_NAME, "h1").text
    browser.find_element(By.ID, "outcome-failed").click()
    browser.find_element(By.ID, "resolve").click()
    wait_for(lambda: "You settled this effect." in text_of(browser))
    assert console.store.get_effect(key).state is EffectState.FAILED
    assert browser.execute_script("return window.__pwned") is None
    assert texts(browser, "#state") == ["failed"]


def _attempt(http: httpx.Client, name: str, secret: str) -> httpx.Response:
    token = csrf_in(http.get("/signin").text)
    return http.post("/signin", data={"csrf": token, "account": name, "secret": secret})


@sqlite_only
def test_sign_in_attempts_are_limited_per_account_and_per_address(browser, console_store):
    console = Console(console_store, **small_limiter())  # 3 per account and address, 5 per address
    try:
        console.add("alice")
        console.add("bob")
        with httpx.Client(base_url=console.url) as http:
            assert [_attempt(http, "alice", "wrong").status_code for _ in range(3)] == [401] * 3
            refused = _attempt(http, "alice", SECRET)  # the right secret, but not checked now
            assert refused.status_code == 429 and "Too many failed sign-in attempts" in refused.text
            assert "ctrlrun_session" not in refused.cookies
            assert _attempt(http, "bob", SECRET).status_code == 303  # another account may
            http.cookies.clear()
            assert [_attempt(http, "nobody", "x").status_code for _ in range(2)] == [401] * 2
            assert _attempt(http, "bob", SECRET).status_code == 429  # this address: 5 failures
        # and the person sees why
        browser.delete_all_cookies()
        browser.get(console.url + "/signin")
        browser.find_element(By.ID, "account").send_keys("alice")
        browser.find_element(By.ID, "secret").send_keys(SECRET)
        browser.find_element(By.ID, "signin").click()
        assert "Too many failed sign-in attempts" in browser.find_element(By.ID, "error").text
    finally:
        console.stop()


@sqlite_only
def test_a_wrong_secret_or_a_stale_sign_in_form_does_not_sign_in(console):
    with httpx.Client(base_url=console.url) as http:
        r = _attempt(http, "alice", "not it")
        assert r.status_code == 401 and "Unknown account or wrong secret" in r.text
        r = _attempt(http, "nobody", SECRET)
        assert r.status_code == 401 and "Unknown account or wrong secret" in r.text
        r = http.post("/signin", data={"csrf": "forged", "account": "alice", "secret": SECRET})
        assert r.status_code == 403 and "ctrlrun_session" not in r.cookies
        r = _attempt(http, "alice", SECRET)
        assert r.status_code == 303 and r.headers["location"] == "/approvals"
        cookie = r.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Secure" not in cookie
        # a next= off this console is not followed
        http.cookies.clear()
        token = csrf_in(http.get("/signin?next=//evil.example/").text)
        r = http.post(
            "/signin",
            data={"csrf": token, "account": "alice", "secret": SECRET, "next": "//evil.example"},
        )
        assert r.headers["location"] == "/approvals"


@sqlite_only
def test_signing_out_or_a_new_secret_ends_the_session(browser, console):
    sign_in(browser, console, "alice")
    with session_client(browser, console) as http:
        accounts.reset(console.store, "alice", "a brand new secret")
        assert http.get("/approvals").status_code == 303  # signed out
    sign_in(browser, console, "bob")
    with session_client(browser, console) as http:
        token = csrf_in(http.get("/approvals").text)
        assert http.post("/signout", data={"csrf": token}).status_code == 303
        assert http.get("/approvals").status_code == 303
    browser.get(console.url + "/approvals")
    assert browser.current_url.startswith(console.url + "/signin")


@sqlite_only
def test_the_proxy_header_is_taken_only_from_a_trusted_address(console_store):
    trusted = Console(
        console_store,
        Settings(proxy_header="X-Forwarded-User", trusted_proxies=networks(["127.0.0.0/8"])),
    )
    untrusted = Console(
        console_store,
        Settings(proxy_header="X-Forwarded-User", trusted_proxies=networks(["10.9.9.9"])),
    )
    try:
        trusted.add("alice")
        rid = ask(console_store, "pi_proxy")
        with httpx.Client(base_url=trusted.url, headers={"X-Forwarded-User": "alice"}) as http:
            page = http.get(f"/approvals/{rid}")
            assert page.status_code == 200 and "(by the proxy)" in page.text
            r = http.post(f"/approvals/{rid}/grant", data={"note": "x"})
            assert r.status_code == 403  # the CSRF token is needed all the same
            r = http.post(f"/approvals/{rid}/grant", data={"csrf": csrf_in(page.text)})
            assert r.status_code == 303
        assert console_store.get_approval(rid).decided_by == "alice"
        with httpx.Client(base_url=trusted.url, headers={"X-Forwarded-User": "mallory"}) as http:
            assert http.get("/approvals").status_code == 303  # not an account
        with httpx.Client(base_url=untrusted.url, headers={"X-Forwarded-User": "alice"}) as http:
            assert http.get("/approvals").status_code == 303  # not from the proxy
    finally:
        trusted.stop()
        untrusted.stop()

"""A page on a made-up name resolved to this machine (DNS rebinding), in a real browser: 421,
no cookie, no sign-in form or token; the console's own name, in the same browser, is served."""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By

from tests_py.console.rig import Console, chrome, text_of

sqlite_only = pytest.mark.parametrize("backend", ["sqlite"])

REBIND = """
const done = arguments[arguments.length - 1];
(async () => {
  const page = await fetch('/signin');
  const form = new URLSearchParams({account: 'alice', secret: 'x', csrf: 'x'});
  const post = await fetch('/signin', {method: 'POST', body: form});
  done([page.status, await page.text(), post.status, document.cookie]);
})().catch((e) => done(['error', String(e)]));
"""


@sqlite_only
def test_a_page_on_a_name_rebound_to_this_machine_gets_421_no_cookie_no_token(console_store):
    console = Console(console_store)
    browser = chrome("--host-resolver-rules=MAP evil.example 127.0.0.1")
    try:
        console.add("alice")
        browser.get(f"http://evil.example:{console.server.port}/signin")
        assert "421 Misdirected Request" in text_of(browser)
        assert not browser.find_elements(By.NAME, "csrf")
        assert browser.get_cookies() == []
        # the page (same origin as the console, by its name) reads and posts: refused alike
        status, body, posted, cookies = browser.execute_async_script(REBIND)
        assert (status, posted, cookies) == (421, 421, "")
        assert "csrf" not in body and "evil.example" in body
        assert browser.get_cookies() == []
        # the console's own name, in the same browser: served
        browser.get(console.url + "/signin")
        assert browser.find_elements(By.NAME, "csrf")
        assert any(c["name"] == "ctrlrun_signin" for c in browser.get_cookies())
    finally:
        browser.quit()
        console.stop()

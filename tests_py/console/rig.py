"""The console test rig: a real console server (uvicorn on a free loopback port, in a thread of
the test process) over a real store, a headless Chromium driven by Selenium, an agent process
whose protected call waits for a person's decision, and an HTTP client for what a browser
would never send (a forged form)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import httpx2 as httpx
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from ctrlrun.console import accounts
from ctrlrun.console.app import build_app
from ctrlrun.console.listen import ConsoleServer
from ctrlrun.console.ratelimit import SignInLimiter
from ctrlrun.console.state import ConsoleState, Settings
from ctrlrun.store.api import Store

ROOT = Path(__file__).resolve().parents[2]
SECRET = "correct horse battery staple"


def chrome(*extra: str) -> webdriver.Chrome:
    """A headless Chromium; ``extra`` are more of its command-line switches."""
    options = webdriver.ChromeOptions()
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1400,900",
        *extra,
    ):
        options.add_argument(arg)
    options.binary_location = os.environ.get("CTRLRUN_TEST_CHROMIUM", "/usr/bin/chromium")
    driver_path = os.environ.get("CTRLRUN_TEST_CHROMEDRIVER", "/usr/bin/chromedriver")
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    driver.set_page_load_timeout(30)
    return driver


class Console:
    """A console served for one test."""

    def __init__(self, store: Store, settings: Optional[Settings] = None, **state: Any) -> None:
        self.store = store
        self.state = ConsoleState(store, settings or Settings(), **state)
        self.server = ConsoleServer(build_app(self.state), "127.0.0.1", 0).start()
        self.url = self.server.url

    def add(self, name: str, secret: str = SECRET) -> None:
        accounts.add(self.store, name, secret)

    def stop(self) -> None:
        self.server.stop()


def wait_for(what: Callable[[], Any], timeout: float = 20.0, why: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = what()
        except StaleElementReferenceException:  # the page was being replaced: look again
            got = None
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {why or what}")
        time.sleep(0.05)


def sign_in(browser: webdriver.Chrome, console: Console, name: str, secret: str = SECRET) -> None:
    browser.delete_all_cookies()
    browser.get(console.url + "/signin")
    browser.find_element(By.ID, "account").send_keys(name)
    browser.find_element(By.ID, "secret").send_keys(secret)
    browser.find_element(By.ID, "signin").click()
    wait_for(lambda: browser.find_elements(By.ID, "me"), why="the signed-in page")
    assert browser.find_element(By.ID, "me").text == name


def texts(browser: webdriver.Chrome, css: str) -> List[str]:
    """The text of each element ``css`` selects, read again if a live update replaced them
    while they were read."""
    for _ in range(20):
        try:
            return [str(e.text) for e in browser.find_elements(By.CSS_SELECTOR, css)]
        except StaleElementReferenceException:
            time.sleep(0.05)
    raise AssertionError(f"{css} kept changing")


def text_of(browser: webdriver.Chrome) -> str:
    return str(browser.find_element(By.TAG_NAME, "body").text)


def session_client(browser: webdriver.Chrome, console: Console) -> httpx.Client:
    """An HTTP client carrying the browser's session cookie (what a forged cross-site form
    would carry, were the cookie not SameSite=Strict)."""
    cookie = browser.get_cookie("ctrlrun_session")
    assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    return httpx.Client(
        base_url=console.url, cookies={"ctrlrun_session": cookie["value"]}, follow_redirects=False
    )


def signed_in(console: Console, name: str = "alice") -> httpx.Client:
    """An HTTP client signed in to ``console`` as ``name`` through the sign-in form."""
    http = httpx.Client(base_url=console.url, follow_redirects=False, timeout=30)
    token = csrf_in(http.get("/signin").text)
    r = http.post("/signin", data={"csrf": token, "account": name, "secret": SECRET})
    assert r.status_code == 303, r.text
    return http


def csrf_in(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, html
    return found.group(1)


AGENT = textwrap.dedent(
    """
    import json, sys
    import ctrlrun
    from ctrlrun import ActionDenied

    store_url, marker, payment_id, memo, who = sys.argv[1:6]
    extra = {"requested_by": who} if who else {}

    @ctrlrun.protect("acme.refund", effect="refund:{payment_id}", store=store_url,
                     decision="approve", approval_timeout=60, fingerprint_exclude=["trace"],
                     **extra)
    def refund(payment_id, amount, memo, trace):
        with open(marker, "a") as f:
            f.write(payment_id + "\\n")
        return {"refunded": amount}

    try:
        print(json.dumps(refund(payment_id, 4200, memo, "t-1")))
    except ActionDenied as exc:
        print(json.dumps({"denied_by": exc.denied_by}))
        sys.exit(3)
    """
)


class Agent:
    """An agent in another OS process, making one protected call that waits for a decision."""

    def __init__(
        self,
        tmp: Path,
        store_url: str,
        payment_id: str,
        memo: str = "customer called",
        requested_by: str = "",
    ) -> None:
        script = tmp / "agent.py"
        script.write_text(AGENT)
        self.marker = tmp / f"ran-{abs(hash(payment_id))}.txt"
        env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
        env.pop("CTRLRUN_CONFIG", None)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(script),
                store_url,
                str(self.marker),
                payment_id,
                memo,
                requested_by,
            ],
            cwd=tmp,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def finish(self, timeout: float = 30) -> subprocess.CompletedProcess:
        out, err = self.proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(self.proc.args, self.proc.returncode, out, err)

    def runs(self) -> List[str]:
        return self.marker.read_text().split() if self.marker.exists() else []

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def pending_of(store: Store, effect_key: str, timeout: float = 20.0) -> Any:
    return wait_for(
        lambda: next(
            (r for r in store.list_approvals("pending") if r.effect_key == effect_key), None
        ),
        timeout,
        f"the pending request of {effect_key}",
    )


def small_limiter() -> Dict[str, Any]:
    """Small limits whose failures never age out during a test: with a 60 s window, a loaded
    machine (scrypt per attempt, a browser start) once let the account's failures expire
    before the browser's attempt, which then signed in instead of being refused."""
    return {
        "limiter": SignInLimiter(
            per_pair=3, per_address=5, per_account=10, window=3600, account_window=3600
        )
    }

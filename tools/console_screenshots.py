#!/usr/bin/env python3
"""Screenshots of each console page for docs/console.md, taken in a headless Chromium from a
console serving a scratch SQLite store with a few requests and effects in it.

    PYTHONPATH=python python tools/console_screenshots.py [--out docs/img]

Writes console-signin.png, console-approvals.png, console-approval.png, console-effects.png
and console-effect.png.
"""

from __future__ import annotations

import argparse
import base64
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Dict

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

import ctrlrun
from ctrlrun import ApprovalRequired
from ctrlrun.call.approval import ask
from ctrlrun.console import accounts
from ctrlrun.console.app import build_app
from ctrlrun.console.listen import ConsoleServer
from ctrlrun.console.state import ConsoleState, Settings

ROOT = Path(__file__).resolve().parents[1]
SECRET = "a secret for the screenshots"


def _fill(store: ctrlrun.Store) -> Dict[str, Any]:
    extra: Dict[str, Any] = {"requested_by": "support-agent"}

    @ctrlrun.protect(
        "billing.refund",
        effect="refund:{payment_id}",
        store=store,
        decision="approve",
        fingerprint_exclude=["trace_id"],
        **extra,
    )
    def refund(payment_id: str, amount: int, reason: str, trace_id: str) -> dict:
        return {"refunded": amount}

    @ctrlrun.protect(
        "email.send", effect="mail:{to}:{subject}", store=store, decision="approve", **extra
    )
    def send(to: str, subject: str, body: str) -> None:
        return None

    ids = []
    for call in (
        lambda: refund("pi_3Qx81", 12500, "duplicate charge, customer called", "tr-9f2a"),
        lambda: send("ceo@example.com", "Q3 numbers", "<b>Draft</b>: revenue up 4%"),
        lambda: refund("pi_3Qx99", 900, "late delivery", "tr-77c1"),
    ):
        try:
            call()
        except ApprovalRequired as exc:
            ids.append(exc.request_id)
    store.deny_approval(ids[2], by="bob", note="already refunded by hand")
    # A payout to an IBAN holding a right-to-left override, that needs two approvers, granted
    # by bob so far: the page shows the override as its code, warns, and counts the grants.
    iban = "DE8937040044053201\u202e0003\u202c"
    payout = ask(
        store,
        "billing.payout",
        "payout:po_118",
        "sha256:" + "5e" * 32,
        {"payout_id": "po_118", "iban": iban, "amount": 48000},
        timedelta(hours=1),
        requested_by="support-agent",
        approvals_needed=2,
    )
    store.grant_approval(payout.request_id, "bob", note="IBAN matches the contract")

    @ctrlrun.protect("bank.transfer", effect="transfer:{ref}", store=store, decision="approve")
    def transfer(ref: str, amount: int) -> None:
        raise TimeoutError("read timed out after 30s waiting for the bank's answer")

    for ref in ("tx-2041", "tx-2042"):
        try:
            transfer(ref, 250_000)
        except ApprovalRequired as exc:
            store.grant_approval(exc.request_id, "bob")
        try:
            transfer(ref, 250_000)
        except TimeoutError:
            pass
    return {"approval": payout.request_id, "effect": "transfer:tx-2041"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "img"))
    out = Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        store = ctrlrun.open_store(f"sqlite:///{tmp}/state.db")
        accounts.add(store, "alice", SECRET)
        accounts.add(store, "bob", SECRET)
        made = _fill(store)
        server = ConsoleServer(build_app(ConsoleState(store, Settings())), "127.0.0.1", 0).start()
        options = webdriver.ChromeOptions()
        for arg in (
            "--headless=new",
            "--no-sandbox",
            "--disable-dev-shm-usage",
            "--window-size=1280,860",
            "--hide-scrollbars",
        ):
            options.add_argument(arg)
        options.binary_location = "/usr/bin/chromium"
        browser = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
        try:

            def shot(path: str, name: str) -> None:
                browser.get(server.url + path)
                time.sleep(0.3)
                height = browser.execute_script("return document.documentElement.scrollHeight")
                clip = {"x": 0, "y": 0, "width": 1280, "height": max(640, int(height)), "scale": 1}
                png = browser.execute_cdp_cmd(  # the whole page, not only the window
                    "Page.captureScreenshot", {"captureBeyondViewport": True, "clip": clip}
                )
                (out / f"console-{name}.png").write_bytes(base64.b64decode(png["data"]))
                print(f"wrote {out / f'console-{name}.png'}")

            # times show in the viewer's zone: the screenshots' viewer is in Berlin
            browser.execute_cdp_cmd(
                "Emulation.setTimezoneOverride", {"timezoneId": "Europe/Berlin"}
            )
            shot("/signin", "signin")
            browser.find_element(By.ID, "account").send_keys("alice")
            browser.find_element(By.ID, "secret").send_keys(SECRET)
            browser.find_element(By.ID, "signin").click()
            time.sleep(0.3)
            shot("/approvals", "approvals")
            shot(f"/approvals/{made['approval']}", "approval")
            shot("/effects", "effects")
            shot("/effects/" + made["effect"], "effect")
        finally:
            browser.quit()
            server.stop()
            store.close()


if __name__ == "__main__":
    main()

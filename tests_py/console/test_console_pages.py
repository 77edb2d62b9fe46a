"""The console's lists at a size where reading everything would show: a page of 50 from the
store (never the whole history), views by state, filters in the URL, pages that join up; a
live update that is a 304 with no body while nothing changed and the new part once something
did; URLs the lists cannot show answered 400. A real server on both backends, real HTTP."""

from __future__ import annotations

import re
from typing import List

import httpx
import pytest
from selenium.webdriver.common.by import By

import ctrlrun
from ctrlrun import ApprovalRequired
from tests_py.console.rig import sign_in, signed_in, texts, wait_for

FRAGMENT = {"X-Ctrlrun-Fragment": "1"}


@pytest.fixture
def http(console):
    client = signed_in(console)
    yield client
    client.close()


def ask_many(store, action: str, who: str, n: int, start: int = 0) -> List[str]:
    @ctrlrun.protect(action, effect="pay:{i}", decision="approve", store=store, requested_by=who)
    def pay(i: int) -> int:
        return i

    ids = []
    for i in range(start, start + n):
        with pytest.raises(ApprovalRequired) as info:
            pay(i)
        ids.append(info.value.request_id)
    return ids


def rows_of(html: str, table: str) -> List[str]:
    part = html.split(f'id="{table}"', 1)
    if len(part) == 1:
        return []
    return re.findall(r'<tr data-request="(apr_[0-9a-f]{32})"', part[1].split("</table>", 1)[0])


def next_of(html: str):
    found = re.search(r'<a class="page" href="([^"]+)" id="next-page"', html)
    return found.group(1).replace("&amp;", "&") if found else None


def walk(http: httpx.Client, url: str, table: str) -> List[str]:
    seen: List[str] = []
    pages = 0
    while url:
        r = http.get(url)
        assert r.status_code == 200, r.text
        got = rows_of(r.text, table)
        assert len(got) <= 50
        seen += got
        url, pages = next_of(r.text), pages + 1
    return seen


def test_lists_come_a_page_at_a_time_and_join_up(console, http):
    store = console.store
    refunds = ask_many(store, "acme.refund", "agent-a", 70)
    wires = ask_many(store, "acme.wire", "agent-b", 50, start=100)
    for rid in refunds[:40]:
        store.deny_approval(rid, by="bob")
    first = http.get("/approvals").text
    assert re.search(r'id="count">80<', first)  # 30 refunds and 50 wires wait
    assert len(rows_of(first, "pending")) == 50 and len(rows_of(first, "recent")) == 10
    pending = walk(http, "/approvals", "pending")
    assert pending == [r.request_id for r in store.list_approvals("pending")]  # oldest first
    decided = walk(http, "/approvals?view=decided", "listed")
    assert decided == [r.request_id for r in store.list_approvals("denied", newest_first=True)]
    mine = walk(http, "/approvals?view=all&requested_by=agent-b&action=acme.wire", "listed")
    assert sorted(mine) == sorted(wires)
    assert walk(http, "/approvals?prefix=pay:14", "pending") == wires[40:]  # pay:140 to 149
    none = http.get("/approvals?view=denied&action=acme.wire").text
    assert 'id="none-listed"' in none and "matches the filters" in none


def test_the_effects_page_browses_every_state(console, http):
    store = console.store

    @ctrlrun.protect("acme.send", effect="send:{i}", store=store)
    def send(i: int) -> int:
        return i

    for i in range(60):
        send(i)
    r = http.get("/effects?view=committed")
    keys = re.findall(r'<tr data-key="([^"]+)"', r.text)
    assert keys == [f"send:{i}" for i in range(59, 9, -1)]  # newest first, 50
    rest = http.get(next_of(r.text)).text
    assert re.findall(r'<tr data-key="([^"]+)"', rest) == [f"send:{i}" for i in range(9, -1, -1)]
    one = http.get("/effects?view=committed&prefix=send:5").text
    assert len(re.findall(r"<tr data-key=", one)) == 11
    assert 'id="no-ambiguous"' in http.get("/effects").text


def test_a_page_ending_on_a_long_key_with_a_trailing_space_leads_on(console, http):
    """The cursor holds the page's last key whole: a key of 600 characters ending in a space
    still leads to the next page, which neither repeats nor skips a row."""
    keys = [f"k:{i:03d}" for i in range(51)]
    keys[1] = "k:" + "x" * 600 + " "
    for key in keys:
        console.store.reserve_effect(key, "act_" + "1" * 32, 300)
    first = http.get("/effects?view=reserved&prefix=k:")
    shown = re.findall(r'<tr data-key="([^"]+)"', first.text)
    assert len(shown) == 50 and shown[-1] == keys[1]
    rest = http.get(next_of(first.text))
    assert rest.status_code == 200, rest.text[:300]
    assert re.findall(r'<tr data-key="([^"]+)"', rest.text) == [keys[0]]


def test_a_live_update_is_a_304_while_nothing_changed(console, http):
    store = console.store
    rid = ask_many(store, "acme.refund", "agent-a", 1)[0]
    first = http.get("/approvals", headers=FRAGMENT)
    tag = first.headers["etag"]
    assert first.status_code == 200 and rid in first.text and "<html" not in first.text
    same = http.get("/approvals", headers={**FRAGMENT, "If-None-Match": tag})
    assert same.status_code == 304 and same.content == b""
    assert same.headers["etag"] == tag and "no-store" in same.headers["cache-control"]
    store.deny_approval(rid, by="bob")
    changed = http.get("/approvals", headers={**FRAGMENT, "If-None-Match": tag})
    assert changed.status_code == 200 and changed.headers["etag"] != tag
    assert rows_of(changed.text, "pending") == [] and rows_of(changed.text, "recent") == [rid]
    page = http.get("/approvals", headers={"If-None-Match": tag})  # a whole page: never 304
    assert page.status_code == 200 and "<html" in page.text


@pytest.mark.parametrize(
    "url, says",
    [
        ("/approvals?view=everything", "There is no view"),
        ("/approvals?after=12", "cursor of a listed record"),
        ("/approvals?after=1:refund:pi_1", "not an approval request"),
        ("/approvals?action=" + "a" * 501, "longer than 500 characters"),
        ("/effects?view=expired", "There is no view"),
        ("/effects?after=x:y", "cursor of a listed record"),
    ],
)
def test_a_list_url_it_cannot_show_is_a_400_saying_why(http, url, says):
    r = http.get(url)
    assert r.status_code == 400 and says in r.text, r.text[:2000]
    assert "Traceback" not in r.text


def test_the_page_script_follows_filters_and_pages_live(browser, console):
    store = console.store
    ask_many(store, "acme.refund", "agent-a", 3)
    ask_many(store, "acme.wire", "agent-b", 2, start=10)
    sign_in(browser, console, "alice")
    browser.get(console.url + "/approvals")
    browser.find_element(By.ID, "filter-action").send_keys("acme.wire")
    browser.find_element(By.ID, "filter").click()
    wait_for(lambda: "action=acme.wire" in browser.current_url, why="the filtered URL")
    assert len(texts(browser, "#pending tbody tr")) == 2
    # a new wire request shows up live, in the filtered view; a refund does not
    new = ask_many(store, "acme.wire", "agent-b", 1, start=20)[0]
    ask_many(store, "acme.refund", "agent-a", 1, start=30)
    wait_for(lambda: texts(browser, f'#pending tr[data-request="{new}"]'), why="the new row")
    assert len(texts(browser, "#pending tbody tr")) == 3
    assert browser.find_element(By.ID, "count").text == "3"

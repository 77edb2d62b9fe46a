"""The console's list pages on a large store (issue 49 item 5): server time of each page beside
its floor, and the bytes of a live update.

    python -m bench.console [--backends sqlite,postgres] [--requests N] [--repeats N] [--json FILE]

Seeded through the product's own writes (the core's, with explicit times; a receipt each):
``--requests`` approval requests (23,000) over 30 days, by 8 requesters for 5 actions; of each
23, 3 pending, 6 granted, 5 denied, 5 used (a reservation used the grant), 4 expired (undecided,
their time ran out). Pages are asked in-process of the console's ASGI app (``httpx``), signed
in; server time is the app's own, from the request to its last byte. The floor: the SELECTs the
page needs (51 rows, the count to 10,000, on the pending view the 10 latest decided) issued
directly, as the product writes them (``listing.rs``), SQLite through ``sqlite3``, PostgreSQL
through psycopg. Bytes: status line, headers and body as the app sends (a server adds ``date``,
``server``).
"""

from __future__ import annotations

import asyncio
import os
import re
import sqlite3
import statistics
import time
from typing import Any, Dict, List, Tuple

import httpx
import psycopg

import ctrlrun
from bench._pgbench import backends, bench_args, write_json
from ctrlrun import _core
from ctrlrun.console import accounts
from ctrlrun.console.app import build_app
from ctrlrun.console.identity import SESSION_COOKIE, secret_mark
from ctrlrun.console.state import ConsoleState, Settings

DAY_US, MIN_US = 86_400 * 1_000_000, 60 * 1_000_000
KINDS = ["pending"] * 3 + ["granted"] * 6 + ["denied"] * 5 + ["used"] * 5 + ["expired"] * 4
ACTIONS, WHO = [f"billing.action_{n}" for n in range(5)], [f"agent-{n}" for n in range(8)]
DECIDED = ("granted", "denied", "used", "expired")
COLUMNS = """request_id, action, args_digest, effect_key, arguments, state, requested_at, ttl,
    expires_at, decided_at, decided_by, note, used_at, used_by, requested_by, approvals_needed,
    granted_by"""
PAGE_MS, UPDATE_BYTES, FRAGMENT = 50.0, 20_000, {"X-Ctrlrun-Fragment": "1"}
STATE = {  # listing.rs's condition for each state as of now ({0})
    "pending": "(state = 'pending' AND expires_at >= {0})",
    "granted": "(state = 'granted' AND expires_at >= {0})",
    "expired": "(state = 'expired' OR (state IN ('pending', 'granted') AND expires_at < {0}))",
    "denied": "state = 'denied'",
    "used": "state = 'used'",
}


def seed(store: ctrlrun.Store, n: int, now_us: int, threads: int) -> None:
    """``n`` approval requests through the core, ``threads`` at once (each its rows whole)."""
    core, step = store._core, 30 * DAY_US // n

    def row(i: int) -> None:
        t, kind = now_us - 30 * DAY_US + i * step, KINDS[i % len(KINDS)]
        action, parts, key = ACTIONS[i % 5], [("n", str(i))], f"{ACTIONS[i % 5]}:{i}"
        ttl = now_us - t + DAY_US if kind in ("pending", "granted", "used") else MIN_US
        digest = _core.arg_digests(parts)[0]
        r = core.request_approval(action, digest, key, f'{{"n":{i}}}', ttl, t, WHO[i % 8], 1)
        if kind in ("granted", "denied", "used"):
            core.decide_approval(r.request_id, kind != "denied", "approver-a", None, t + MIN_US)
        if kind == "used":
            act, at = "act_" + os.urandom(16).hex(), t + 2 * MIN_US
            core.reserve(_core.ReserveRequest(key, act, MIN_US, at, True, action, parts, True))

    async def run() -> None:
        chunk = lambda k: [row(i) for i in range(k, n, threads)]  # noqa: E731
        await asyncio.gather(*(asyncio.to_thread(chunk, k) for k in range(threads)))

    asyncio.run(run())


def floor_statements(table: str, case: Dict[str, Any], sqlite: bool) -> List[Any]:
    """The SELECTs a page of ``case`` needs, as ``listing.rs`` writes them, and their
    parameters."""
    mark = "?" if sqlite else "%s"

    def where(states: Tuple[str, ...], after: List[Any]) -> Tuple[str, List[Any]]:
        several = len(states) > 1 or states == ("expired",)  # as listing.rs: no state index
        shown = [
            re.sub(r"\bstate\b", "(state || '')", STATE[s]) if several else STATE[s] for s in states
        ]
        sql = "(" + " OR ".join(c.format(mark) for c in shown) + ")"
        params: List[Any] = [now] * sum("{0}" in STATE[s] for s in states)
        for col, value in case.get("eq", {}).items():
            sql, params = f"{sql} AND {col} = {mark}", [*params, value]
        if after:
            op = "<" if case["newest"] else ">"
            sql += f" AND (requested_at, request_id) {op} ({mark}, {mark})"
            params += after
        return sql, params

    def listing(states: Tuple[str, ...], newest: bool, limit: int, after: List[Any]) -> Any:
        desc = " DESC" if newest else ""
        sql, params = where(states, after)
        order = f"ORDER BY requested_at{desc}, request_id{desc} LIMIT {limit}"
        return f"SELECT {COLUMNS} FROM {table} WHERE {sql} {order}", params

    now, states = int(time.time() * 1_000_000), case["states"]
    count, params = where(states, [])
    count = f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE {count} LIMIT 10000) c"
    out = [listing(states, case["newest"], 51, case.get("after", [])), (count, params)]
    if states == ("pending",):
        out.append(listing(DECIDED, True, 10, []))
    return out


def _stats(times: List[float]) -> Dict[str, float]:
    """The median and the p95 (nearest rank) of ``times`` in ms, the first 3 left out (warm-up)."""
    times = sorted(times[3:])
    p95 = times[max(0, round(0.95 * len(times)) - 1)]
    return {"median_ms": round(statistics.median(times), 2), "p95_ms": round(p95, 2)}


def _timed(app: Any, spent: List[float]) -> Any:
    """``app``, noting the time of each request, from its start to its last byte sent."""

    async def timed(scope: Any, receive: Any, send: Any) -> None:
        t = time.perf_counter()
        await app(scope, receive, send)
        spent.append((time.perf_counter() - t) * 1000)

    return timed


def _bytes(r: httpx.Response) -> int:
    head = len(f"HTTP/1.1 {r.status_code} {r.reason_phrase}\r\n\r\n")
    return head + sum(len(k) + len(v) + 4 for k, v in r.headers.raw) + len(r.content)


async def pages(store: ctrlrun.Store, cases: Dict[str, Any], repeats: int) -> Dict[str, Any]:
    state = ConsoleState(store, Settings())
    account = accounts.add(store, "bench", "correct horse battery staple")
    session = state.sessions.start(account.name, secret_mark(account.secret_hash))
    spent: List[float] = []
    transport, out = httpx.ASGITransport(app=_timed(build_app(state), spent)), {}
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
        c.cookies.set(SESSION_COOKIE, session.token)

        async def get(url: str, status: int, **headers: str) -> Tuple[Dict[str, float], Any]:
            spent.clear()
            for _ in range(3 + repeats):
                r = await c.get(url, headers=headers)
                assert r.status_code == status, (url, r.status_code, r.text[:300])
            return _stats(spent), r

        for name, case in cases.items():
            out[name], page = await get(case["url"], 200)
            out[name].update(bytes=_bytes(page), tr=page.text.count("<tr"))
        url = cases["pending"]["url"]
        tag = (await get(url, 200, **FRAGMENT))[1].headers["etag"]
        same, unchanged = await get(url, 304, **FRAGMENT, **{"If-None-Match": tag})
        changed = await c.get(url, headers={**FRAGMENT, "If-None-Match": '"other"'})
        out["live update, unchanged"] = {**same, "bytes": _bytes(unchanged), "status": 304}
        out["live update, changed"] = {"bytes": _bytes(changed), "status": changed.status_code}
    return out


def measure(url: str, db: Any, table: str, args: Any) -> Dict[str, Any]:
    """Seed the store at ``url``, ask for its pages, and time their floors on ``db``."""
    store, t = ctrlrun.open_store(url), time.perf_counter()
    seed(store, args.requests, int(time.time() * 1_000_000), 1 if "sqlite" in url else 8)
    out: Dict[str, Any] = {"seed_s": round(time.perf_counter() - t, 1)}
    out["counts"] = {s: store.count_approvals(s, cap=10**9) for s in ("pending", *DECIDED)}
    depth = sum(out["counts"][s] for s in DECIDED) * 3 // 4  # a page deep in the history
    deep = store.list_approvals(list(DECIDED), newest_first=True, limit=depth)[-1]
    at_us = round(deep.requested_at.timestamp() * 1_000_000)  # exact: doubles are 0.24 µs apart
    a, w = ACTIONS[2], WHO[3]
    cases = {
        "pending": {"url": "/approvals", "states": ("pending",), "newest": False},
        "decided": {"url": "/approvals?view=decided", "states": DECIDED, "newest": True},
        f"decided, after {depth:,}": {"url": f"/approvals?view=decided&after={deep.cursor}",
            "states": DECIDED, "newest": True, "after": [at_us, deep.request_id]},
        "action & requested_by": {"url": f"/approvals?action={a}&requested_by={w}",
            "states": ("pending",), "newest": False, "eq": {"action": a, "requested_by": w}},
    }  # fmt: skip
    out["pages"] = asyncio.run(pages(store, cases, args.repeats))
    store.close()
    for name, case in cases.items():
        steps = floor_statements(table, case, sqlite=isinstance(db, sqlite3.Connection))
        times = []
        for _ in range(3 + args.repeats):
            t = time.perf_counter()
            [db.execute(q, p).fetchall() for q, p in steps]
            times.append((time.perf_counter() - t) * 1000)
        out["pages"][name]["floor"] = _stats(times)
    return out


def report(results: Dict[str, Any]) -> str:
    lines = [
        f"{'':9} {'page':22} {'p50 ms':>7} {'p95 ms':>7} {'floor p50':>9} {'bytes':>7}  target"
    ]
    for backend in ("sqlite", "postgres"):
        for name, r in results.get(backend, {}).get("pages", {}).items():
            page = "floor" in r
            ok = r["p95_ms"] < PAGE_MS if page else r["bytes"] < UPDATE_BYTES
            verdict = "info" if name == "live update, changed" else "PASS" if ok else "MISS"
            times = f"{r['median_ms']:7.2f} {r['p95_ms']:7.2f}" if "median_ms" in r else " " * 15
            floor = f"{r['floor']['median_ms']:.2f}" if page else r["status"]
            target = f"<{PAGE_MS:g} ms" if page else f"<{UPDATE_BYTES:,} B"
            row = f"{name:22} {times} {floor:>9} {r['bytes']:7,}  {target} {verdict}"
            lines.append(f"{backend:9} {row}")
    return "\n".join(lines)


def main() -> int:
    args = bench_args(__doc__, backends="sqlite,postgres", requests=23_000, repeats=30)
    results: Dict[str, Any] = {"requests": args.requests, "repeats": args.repeats}
    for backend, url, pg in backends(args.backends, "console"):
        if pg is None:
            db: Any = sqlite3.connect(url[len("sqlite:///") :].split("?")[0])
        else:
            db = psycopg.connect(pg[0], autocommit=True, prepare_threshold=None)
        table = "ctrlrun_approvals" if pg is None else f'"{pg[1]}".ctrlrun_approvals'
        results[backend] = measure(url, db, table, args)
        db.close()
    print(report(results))
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Retention and list filters on a large store: ``effects list --prefix`` and ``Store.prune``
on 1,000,000 rows filled by SQL (a receipt per row from ctrlrun's triggers), each beside its
floor in the same run: the same SELECT on the same index, a plain batched ``DELETE`` on a copy
of the table (no receipts, no check of approvals). bench/README.md says what is measured.

    python -m bench.retention [--rows N] [--backends sqlite,postgres] [--json FILE]
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from functools import partial
from typing import Any, Callable, Dict, List

import ctrlrun
from bench._pgbench import backends, bench_args, median_ms, psql, write_json

DAY_US = 86_400 * 1_000_000
PREFIX = "refund:cus_0042:"
BATCH = 1000


def _row_values(now_us: int) -> str:
    """SQL computing one row's columns from ``i`` (both dialects)."""
    return f"""
        'refund:cus_' || substr('0000' || (i % 1000), -4, 4) || ':' || i AS effect_key,
        CASE WHEN i % 100 = 7 THEN 'failed' WHEN i % 100 = 9 THEN 'ambiguous'
             ELSE 'committed' END AS state,
        'act_' || i AS action_id, 1 AS attempt,
        {now_us} - (i % 90) * {DAY_US} - i AS created_at,
        {now_us} - (i % 90) * {DAY_US} - i + 1000 AS updated_at,
        'tool.action_' || (i % 10) AS action"""


# -- SQLite ---------------------------------------------------------------------------------------


def sqlite_fill(path: str, rows: int, now_us: int) -> None:
    ctrlrun.open_store(path).close()  # ctrlrun creates its tables and indexes
    db = sqlite3.connect(path)
    db.create_function("ctrlrun_receipt_hash", 15, lambda *a: "0" * 64, deterministic=True)
    db.execute("PRAGMA synchronous = OFF")
    db.execute(f"""
        INSERT INTO ctrlrun_effects (effect_key, state, action_id, attempt, created_at,
            updated_at, action, last_event, written_by, receipt_seq, receipt_hash)
        WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {rows})
        SELECT effect_key, state, action_id, attempt, created_at, updated_at, action,
               'outcome', 'bench:1', 1, 'fill'
        FROM (SELECT {_row_values(now_us)} FROM n)""")
    db.commit()
    db.execute("ANALYZE")
    db.close()


def sqlite_list_floor(path: str) -> float:
    db = sqlite3.connect(path)
    end = PREFIX[:-1] + chr(ord(PREFIX[-1]) + 1)
    q = (
        "SELECT * FROM ctrlrun_effects WHERE effect_key >= ? AND effect_key < ? "
        "ORDER BY created_at, effect_key"
    )
    ms = median_ms(lambda: db.execute(q, (PREFIX, end)).fetchall())
    db.close()
    return ms


def sqlite_prune_floor(path: str, cut_us: int) -> Dict[str, float]:
    copy = path + ".floor"
    shutil.copy(path, copy)
    db = sqlite3.connect(copy, isolation_level=None)
    removed, t = 0, time.perf_counter()
    for state in ("committed", "failed"):
        while True:
            db.execute("BEGIN IMMEDIATE")
            n = db.execute(
                "DELETE FROM ctrlrun_effects WHERE effect_key IN (SELECT effect_key FROM "
                "ctrlrun_effects WHERE state = ? AND created_at < ? LIMIT ?)",
                (state, cut_us, BATCH),
            ).rowcount
            db.execute("COMMIT")
            removed += n
            if n < BATCH:
                break
    elapsed = time.perf_counter() - t
    db.close()
    os.remove(copy)
    return {"rows": removed, "seconds": round(elapsed, 2), "rows_per_s": round(removed / elapsed)}


# -- PostgreSQL -----------------------------------------------------------------------------------


def pg_fill(url: str, schema: str, rows: int, now_us: int) -> None:
    values = _row_values(now_us).replace(
        "substr('0000' || (i % 1000), -4, 4)", "lpad((i % 1000)::text, 4, '0')"
    )
    psql(
        url,
        f"""
        INSERT INTO "{schema}".ctrlrun_effects (key_digest, effect_key, state, action_id,
            attempt, created_at, updated_at, action, last_event, written_by, receipt_seq,
            receipt_hash)
        SELECT sha256(convert_to(effect_key, 'UTF8')), effect_key, state, action_id, attempt,
               created_at, updated_at, action, 'outcome', 'bench:1', 1, 'fill'
        FROM (SELECT {values} FROM generate_series(1, {rows}) i) r""",
    )
    psql(url, f'VACUUM ANALYZE "{schema}".ctrlrun_effects')


def pg_list_floor(url: str, schema: str) -> float:
    end = PREFIX[:-1] + chr(ord(PREFIX[-1]) + 1)
    q = (
        f'EXPLAIN (ANALYZE, FORMAT JSON) SELECT * FROM "{schema}".ctrlrun_effects '
        f"WHERE left(effect_key, 200) COLLATE \"C\" >= '{PREFIX}' AND left(effect_key, 200) "
        f"COLLATE \"C\" < '{end}' ORDER BY created_at, effect_key"
    )
    times = [json.loads(psql(url, q))[0]["Execution Time"] for _ in range(7)]
    return round(statistics.median(times), 2)


def pg_prune_floor(url: str, schema: str, cut_us: int) -> Dict[str, float]:
    t = f'"{schema}".floor_copy'
    psql(url, f'CREATE TABLE {t} (LIKE "{schema}".ctrlrun_effects INCLUDING ALL)')
    psql(url, f'INSERT INTO {t} SELECT * FROM "{schema}".ctrlrun_effects')
    psql(url, f"VACUUM ANALYZE {t}")
    before = int(psql(url, f"SELECT count(*) FROM {t}"))
    start = time.perf_counter()
    psql(
        url,
        f"""DO $$ DECLARE s text; n int; BEGIN
        FOREACH s IN ARRAY ARRAY['committed', 'failed'] LOOP
            LOOP
                DELETE FROM {t} WHERE key_digest IN (SELECT key_digest FROM {t}
                    WHERE state = s AND created_at < {cut_us} LIMIT {BATCH});
                GET DIAGNOSTICS n = ROW_COUNT;
                COMMIT;
                EXIT WHEN n < {BATCH};
            END LOOP;
        END LOOP; END $$""",
    )
    elapsed = time.perf_counter() - start
    removed = before - int(psql(url, f"SELECT count(*) FROM {t}"))
    psql(url, f"DROP TABLE {t}")
    return {"rows": removed, "seconds": round(elapsed, 2), "rows_per_s": round(removed / elapsed)}


# -- ctrlrun --------------------------------------------------------------------------------------


def measure(
    url: str,
    fill: Callable[[], None],
    list_floor: Callable[[], float],
    prune_floor: Callable[[int], Dict[str, float]],
    now_us: int,
) -> Dict[str, Any]:
    t = time.perf_counter()
    fill()
    out: Dict[str, Any] = {"fill_s": round(time.perf_counter() - t, 1)}
    store = ctrlrun.open_store(url)
    found = store.list_effects(prefix=PREFIX)
    out["list_prefix_rows"] = len(found)
    out["list_prefix_ms"] = median_ms(lambda: store.list_effects(prefix=PREFIX))
    out["list_prefix_floor_ms"] = list_floor()
    cli = [sys.executable, "-m", "ctrlrun", "effects", "list", "--prefix", PREFIX, "--json"]
    env = dict(os.environ, CTRLRUN_STORE=url)  # a URL may hold a password: never an argument
    out["cli_list_prefix_ms"] = median_ms(
        lambda: subprocess.run(cli, capture_output=True, check=True, env=env), repeats=3
    )
    out["list_ambiguous_limit_100_ms"] = median_ms(
        lambda: store.list_effects("ambiguous", limit=100)
    )
    # no index of their own (each index costs every protected call): these read the table
    out["list_action_limit_100_scan_ms"] = median_ms(
        lambda: store.list_effects(action="tool.action_3", limit=100), repeats=3
    )
    out["list_limit_10_scan_ms"] = median_ms(lambda: store.list_effects(limit=10), repeats=3)
    cut_us = now_us - 30 * DAY_US
    out["prune_floor"] = prune_floor(cut_us)
    marks: List[float] = []
    t = time.perf_counter()
    removed = store.prune(
        timedelta(days=30), batch_size=BATCH, progress=lambda n: marks.append(time.perf_counter())
    )
    elapsed = time.perf_counter() - t
    gaps = [b - a for a, b in zip([t, *marks], marks)]
    out["prune"] = {
        "rows": removed,
        "seconds": round(elapsed, 2),
        "rows_per_s": round(removed / elapsed),
        "median_batch_ms": round(statistics.median(gaps) * 1000, 1),
        "longest_batch_ms": round(max(gaps) * 1000, 1),
    }
    store.close()
    return out


def main() -> int:
    args = bench_args(__doc__, rows=1_000_000, backends="sqlite,postgres")
    now_us = int(time.time() * 1_000_000)
    results: Dict[str, Any] = {"rows": args.rows, "batch": BATCH, "prefix": PREFIX}
    for name, url, pg in backends(args.backends, "retention"):
        on = pg or (url[len("sqlite:///") :].split("?")[0],)  # the server and schema, or the file
        fill, list_floor, prune_floor = (
            (sqlite_fill, sqlite_list_floor, sqlite_prune_floor)
            if pg is None
            else (pg_fill, pg_list_floor, pg_prune_floor)
        )
        fill_rows = partial(fill, *on, args.rows, now_us)
        floors = partial(list_floor, *on), partial(prune_floor, *on)
        results[name] = measure(url, fill_rows, *floors, now_us)
    print(json.dumps(results, indent=2))
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())

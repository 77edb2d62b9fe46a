"""What the schema's two helper functions cost per call on the server (issue 34, items 4 and 5),
and how much of it their ``SET search_path`` clause takes: ``ctrlrun_receipt_hash`` (each write's
receipt hash) and ``ctrlrun_durable`` (each autocommit write's durability guard), each beside a
copy without the clause, and a PL/pgSQL function that does nothing.

    python3 tests_py/support/pgserver.py -- python -m bench.pg_helper_cost [--seconds 5]

Each row is pgbench (1 client, prepared) of one ``SELECT`` that calls the function 20 times
with a key that changes per call (so nothing is folded at plan time); the per-call cost is the
latency above the same ``SELECT`` of a plain expression, divided by 20. A protected call makes
two hashes and two guards.

Measured (2 cores, two runs): the hash 8.3 µs with its clause, 5.8-6.3 µs without; the guard
2.1-2.7 µs with it, 0.65-0.7 µs without; an empty PL/pgSQL function 0.4 µs. Dropping the clauses would save about 9 µs
of a fresh call's 550-700 µs of server CPU, and the clause pins every name the functions look
up (an operator or function put earlier on a pooled session's ``search_path`` cannot stand in),
so they stay.
"""

from __future__ import annotations

import argparse
import uuid

import ctrlrun
from bench._pgbench import _psql, pgbench, server_url

FIELDS = (
    "'effect', :k::text, NULL, '1', NULL, '1700000000000000', 'reservation', 'bench.effect', "
    "'act_0123456789abcdef', '1', 'executing', '" + "d" * 64 + "', NULL, 'w-1-1'"
)
HASH_BODY = (
    "DECLARE fields text := ''; x text; BEGIN FOREACH x IN ARRAY f LOOP "
    "fields := fields || COALESCE(octet_length(convert_to(x, 'UTF8'))::text || ':' || x, '~'); "
    "END LOOP; RETURN encode(sha256(convert_to(fields, 'UTF8')), 'hex'); END"
)
GUARD_BODY = "BEGIN SET LOCAL synchronous_commit TO DEFAULT; RETURN true; END"


def latency_ms(url: str, expression: str, seconds: float) -> float:
    """The latency of one SELECT of ``expression`` 20 times (one pgbench client, prepared)."""
    select = ", ".join([expression] * 20)
    script = f"\\set k random(1, 4000000000000000000)\nSELECT {select};\n"
    return 1000 / pgbench(url, 1, seconds, script, "prepared")["calls_per_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    pg = server_url(__name__)
    schema = f"ctrlrun_scratch_tph_{uuid.uuid4().hex[:8]}"
    ctrlrun.open_store(pg + ("&" if "?" in pg else "?") + f"schema={schema}").close()
    s = f'"{schema}"'
    _psql(
        pg,
        f"CREATE FUNCTION {s}.hash_unpinned(VARIADIC f text[]) RETURNS text LANGUAGE plpgsql "
        f"IMMUTABLE AS $$ {HASH_BODY} $$; "
        f"CREATE FUNCTION {s}.durable_pinned(k text) RETURNS boolean LANGUAGE plpgsql VOLATILE "
        f"SET search_path = pg_catalog, pg_temp AS $$ {GUARD_BODY} $$; "
        f"CREATE FUNCTION {s}.durable_unpinned(k text) RETURNS boolean LANGUAGE plpgsql "
        f"VOLATILE AS $$ {GUARD_BODY} $$; "
        f"CREATE FUNCTION {s}.nothing(k text) RETURNS boolean LANGUAGE plpgsql VOLATILE "
        f"AS $$ BEGIN RETURN true; END $$",
    )
    rows = [
        ("ctrlrun_receipt_hash (as shipped)", f"{s}.ctrlrun_receipt_hash({FIELDS})"),
        ("  the same, no SET search_path", f"{s}.hash_unpinned({FIELDS})"),
        ("ctrlrun_durable's body, pinned (as shipped)", f"{s}.durable_pinned(:k::text)"),
        ("  the same, no SET search_path", f"{s}.durable_unpinned(:k::text)"),
        ("an empty PL/pgSQL function", f"{s}.nothing(:k::text)"),
    ]
    try:
        base = latency_ms(pg, "length(:k::text)", args.seconds)
        print(f"{'function':<46} {'µs per call':>12}")
        for name, expression in rows:
            each = (latency_ms(pg, expression, args.seconds) - base) * 1000 / 20
            print(f"{name:<46} {each:>12.1f}", flush=True)
    finally:
        _psql(pg, f"DROP SCHEMA {s} CASCADE")


if __name__ == "__main__":
    main()

"""Where a fresh protected call's PostgreSQL server time goes (issue 34, items 4 and 5): pgbench
with one client runs each variant of the same work for a few seconds, and reports calls per
second and the server's CPU per call (every ``postgres`` process, ``bench/_cpu.py``).

    python3 tests_py/support/pgserver.py -- python -m bench.pg_server_profile [--seconds S]

The variants:
* the two-statement floor, prepared and unnamed: what parse and plan cost per statement;
* ctrlrun's own statements (read off the wire), unnamed as the default URL sends them and
  prepared as ``prepared_statements=on`` does;
* the same, prepared, with the receipt triggers of the effects table disabled: what appending
  the receipts by trigger costs (the run writes no receipts: for measurement only);
* ctrlrun's statements without their PL/pgSQL functions: the ``INSERT`` and the ``UPDATE``
  the functions run (``ctrlrun_insert``'s and ``ctrlrun_transition``'s bodies) sent prepared as
  they are, then without the ``ctrlrun_durable()`` call, then with each receipt hash a constant
  as well: what the functions' layer, the durability guard and the server's hash each cost
  (the last two write rows no verifier would accept: for measurement only);
* the receipts floor (``bench/_floor_receipts.py``), prepared and unnamed;
* ctrlrun's statements as SQL-level prepared statements (``PREPARE`` once per session, then
  ``EXECUTE name(...)`` sent unnamed, its values bound as parameters): the pooler-safe plan
  cache that names of our own would give the default URL. The server refuses it (a utility
  statement takes no bound parameters: "bind message supplies 1 parameters, but prepared
  statement "" requires 0"), and the store never puts values in a statement's text, so the row
  prints the server's refusal.
"""

from __future__ import annotations

import argparse
import re
import subprocess
from typing import Callable, Dict, List

from bench._pgbench import (
    INSERT_VALUES,
    OUTCOME_VALUES,
    _psql,
    ctrlrun_script,
    executed_script,
    pgbench,
    query,
    receipts_script,
    script_schema,
    server_url,
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    pg = server_url(__name__)
    ours = ctrlrun_script(pg)
    schema = script_schema(ours)
    table = f'"{schema}".ctrlrun_effects'
    receipts = receipts_script(pg)
    executed = executed_script(ours)

    def triggers(on: bool) -> None:
        verb = "ENABLE" if on else "DISABLE"
        _psql(
            pg,
            f"ALTER TABLE {table} {verb} TRIGGER ctrlrun_effects_receipt_insert; "
            f"ALTER TABLE {table} {verb} TRIGGER ctrlrun_effects_receipt_update",
        )

    def without_triggers() -> Dict[str, float]:
        triggers(False)
        try:
            return pgbench(pg, 1, args.seconds, ours, "prepared")
        finally:
            triggers(True)

    raw = raw_script(pg, schema)
    no_durable = re.sub(r"FROM \(SELECT [^)]*ctrlrun_durable\(\)\) durable\(ok\) ", "", raw)
    constant_hash = constant_hashes(no_durable)

    variants: Dict[str, Callable[[], Dict[str, float]]] = {
        "floor, prepared": lambda: pgbench(pg, 1, args.seconds),
        "floor, unnamed": lambda: pgbench(pg, 1, args.seconds, mode="extended"),
        "ctrlrun's SQL, unnamed (the default)": lambda: pgbench(
            pg, 1, args.seconds, ours, "extended"
        ),
        "ctrlrun's SQL, prepared": lambda: pgbench(pg, 1, args.seconds, ours, "prepared"),
        "ctrlrun's SQL, prepared, no receipt triggers": without_triggers,
        "the functions' statements alone, prepared": lambda: pgbench(
            pg, 1, args.seconds, raw, "prepared"
        ),
        "  the same, no ctrlrun_durable()": lambda: pgbench(
            pg, 1, args.seconds, no_durable, "prepared"
        ),
        "  the same, each receipt hash a constant": lambda: pgbench(
            pg, 1, args.seconds, constant_hash, "prepared"
        ),
        "ctrlrun's SQL, EXECUTE of PREPARE, unnamed": lambda: pgbench(
            pg, 1, args.seconds, executed, "extended", ("-D", "prepared=0")
        ),
        "receipts floor, prepared": lambda: pgbench(pg, 1, args.seconds, receipts, "prepared"),
        "receipts floor, unnamed": lambda: pgbench(pg, 1, args.seconds, receipts, "extended"),
    }
    print(f"{'variant (pgbench, 1 client)':<46} {'calls/s':>8} {'server CPU':>11}")
    for name, run in variants.items():
        try:
            out = run()
        except subprocess.CalledProcessError as exc:
            said = [ln for ln in (exc.stderr or "").splitlines() if "ERROR" in ln]
            print(f"{name:<46} refused: {said[0].split('ERROR:')[-1].strip() if said else exc}")
            continue
        print(
            f"{name:<46} {out['calls_per_s']:>8,.0f} {out['server_cpu_us']:>8,.0f} µs", flush=True
        )


def raw_script(url: str, schema: str) -> str:
    """A fresh call as the statements inside ``ctrlrun_insert`` and ``ctrlrun_transition``
    (read from the server's catalog), with the same values as ``ctrlrun_script``."""
    bodies = []
    for fn in ("ctrlrun_insert", "ctrlrun_transition"):
        src = query(
            url,
            f"SELECT prosrc FROM pg_proc WHERE proname = '{fn}' "
            f"AND pronamespace = '\"{schema}\"'::regnamespace",
        )
        m = re.search(r"RETURN QUERY (.*); END", src, re.S)
        assert m, src
        bodies.append(m.group(1).strip())

    def bind(body: str, values: List[str]) -> str:
        return re.sub(r"\$(\d+)", lambda m: values[int(m.group(1)) - 1], body)

    return (
        "\\set k random(1, 4000000000000000000)\n"
        + bind(bodies[0], INSERT_VALUES)
        + ";\n"
        + bind(bodies[1], OUTCOME_VALUES)
        + ";\n"
    )


def constant_hashes(script: str) -> str:
    """Each call of the schema's receipt hash in ``script`` replaced by a constant digest."""
    out, at = [], 0
    for m in re.finditer(r'"[^"]+"\.ctrlrun_receipt_hash\(', script):
        if m.start() < at:
            continue
        depth, i = 1, m.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(script[i], 0)
            i += 1
        out.append(script[at : m.start()] + "'" + "e" * 64 + "'")
        at = i
    return "".join(out) + script[at:]


if __name__ == "__main__":
    main()

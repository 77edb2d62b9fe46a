"""Whether the durability guard's form costs throughput (issue 34, item 5): ctrlrun's own
statements for a fresh call (``ctrlrun_script``) under pgbench with ``CLIENTS`` clients,
interleaved rounds of two forms of the hot functions on the same scratch schema:

* as shipped: each write joins ``(SELECT ctrlrun_durable()) durable(ok)``, whose
  ``SET LOCAL synchronous_commit TO DEFAULT`` covers the statement's own commit;
* the same ``SET LOCAL`` as the functions' first PL/pgSQL statement, with no join.

    python3 tests_py/support/pgserver.py -- python -m bench.pg_durable_variant [--clients 8]
        [--seconds 6] [--rounds 3]

Prints calls/s per round and the best of each. Measured in three runs (2 cores, 8 clients,
5-6 s per round; calls/s as shipped, then with ``SET LOCAL`` in the body):

* 2,487 / 2,339 / 2,243 against 2,440 / 2,204 / 2,317;
* 2,355 / 2,352 against 2,540 / 2,743;
* 2,417 / 2,444 / 2,243 / 2,213 against 2,432 / 2,300 / 2,502 / 2,505.

The means are 2,344 and 2,443 calls/s (+4%), less than the spread between rounds of one form:
no lever for item 5's 0.6x, so the shipped form was kept.
"""

from __future__ import annotations

import argparse
import re
from typing import Dict, List

from bench._pgbench import _psql, ctrlrun_script, pgbench, query, script_schema, server_url

JOIN = r"FROM \(SELECT [^)]*ctrlrun_durable\(\)\) durable\(ok\) "


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    pg = server_url(__name__)
    ours = ctrlrun_script(pg)
    schema = script_schema(ours)
    forms: Dict[str, List[str]] = {"as shipped": [], "SET LOCAL in the body": []}
    for fn in ("ctrlrun_reserve", "ctrlrun_transition"):
        shipped = query(pg, f"SELECT pg_get_functiondef('\"{schema}\".{fn}'::regproc)")
        body = re.sub(JOIN, "", shipped).replace(
            "BEGIN RETURN QUERY", "BEGIN SET LOCAL synchronous_commit TO DEFAULT; RETURN QUERY", 1
        )
        assert body.count("SET LOCAL") == 1 and "ctrlrun_durable" not in body, body
        forms["as shipped"].append(shipped)
        forms["SET LOCAL in the body"].append(body)
    runs: Dict[str, List[float]] = {name: [] for name in forms}
    for _ in range(args.rounds):
        for name, definitions in forms.items():
            for sql in definitions:
                _psql(pg, sql)
            runs[name].append(
                pgbench(pg, args.clients, args.seconds, ours, "prepared")["calls_per_s"]
            )
    for name, per_s in runs.items():
        each = " / ".join(f"{x:,.0f}" for x in per_s)
        print(f"{args.clients} clients, {name:<22} {each}  (best {max(per_s):,.0f} calls/s)")


if __name__ == "__main__":
    main()

"""Where the PostgreSQL server's CPU per protected call goes beyond the receipts floor (issue 51,
item 1): pgbench with one client, prepared, on

* the receipts floor's two statements (``bench/_floor_sql.py``),
* the same statements, each inside a plain PL/pgSQL function,
* the same, each inside a ``SECURITY DEFINER`` function with the settings ctrlrun's functions pin
  (``search_path``, ``plan_cache_mode``): the cost of the separation of duties' function layer,
* ctrlrun's own calls (``ctrlrun_reserve``, ``ctrlrun_transition``), read off the wire,
* the same functions without their durability steps (``statements::DURABLE``).

The server's CPU is every ``postgres`` process's (``bench/_cpu.py``), read after each run once the
backend has exited; each variant runs ``--repeats`` times, interleaved, and prints its fastest and
median run. Not a test, not part of ``make bench``: a profile.

    python3 -m throwaway.pgserver -- .venv/bin/python tools/pg_layer_cost.py [--calls N] [--repeats R]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _pgbench
from bench._cpu import CpuMeter
from bench._pgbench import _client, psql

DURABLE = re.compile(r"SET LOCAL synchronous_commit TO DEFAULT;.*?END IF;", re.S)
HOT = {"ctrlrun_reserve": "x_reserve", "ctrlrun_transition": "x_transition"}


def wrapped(pg: str, floor: str, definer: bool) -> str:
    """The floor's statements, each the body of a function of its schema."""
    schema = re.search(r'"(ctrlrun_scratch_tpf_[0-9a-f]+)"', floor).group(1)
    head, body = floor.split("\n", 1)  # pgbench's `\set`, then the statements
    statements = [s.strip() for s in body.split(";\n") if s.strip()]
    settings = "SECURITY DEFINER SET search_path = pg_catalog, pg_temp " * definer
    settings += "SET plan_cache_mode = force_generic_plan" * definer
    script = head + "\n"
    for i, statement in enumerate(statements):
        body = statement.replace("('tp-k' || CAST(:k AS text))", "$1")
        name = f'"{schema}".w{i}_{"definer" if definer else "plain"}'
        psql(pg, f"CREATE FUNCTION {name}(text) RETURNS SETOF int LANGUAGE plpgsql {settings} "
                 f"AS $fn$ BEGIN RETURN QUERY {body}; END $fn$")  # fmt: skip
        script += f"SELECT * FROM {name}(('tp-k' || CAST(:k AS text)));\n"
    return script


def without_durability(pg: str, ours: str) -> str:
    """ctrlrun's calls, made of copies of its hot functions without the durability steps."""
    schema = re.search(r'"(ctrlrun_scratch_tps_[0-9a-f]+)"', ours).group(1)
    for name, copy in HOT.items():
        made = psql(pg, f"SELECT pg_get_functiondef('\"{schema}\".{name}'::regproc)")
        made = DURABLE.sub("", made.replace(f".{name}(", f".{copy}(", 1))
        psql(pg, made)
        ours = ours.replace(f'"{schema}".{name}(', f'"{schema}".{copy}(')
    return ours


def server_us(pg: str, script: str, calls: int) -> float:
    """Server CPU per call of one pgbench client making ``calls`` calls, prepared."""
    env, base, db = _client(pg, "pgbench")
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"pg_layer_cost_{os.getpid()}.sql"
    path.write_text(script)
    try:
        cpu = CpuMeter(children=True)
        command = [*base, "-n", "-M", "prepared", "-c", "1", "-t", str(calls), "-f", str(path), db]
        run = subprocess.run(command, env=env, capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"pgbench failed on {path.name}: {run.stderr.strip()[-400:]}")
        time.sleep(0.5)  # the backend has exited and its CPU is counted
        return cpu.per_call(calls)["server_cpu_us"]
    finally:
        path.unlink()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    pg = os.environ.get("CTRLRUN_TEST_POSTGRES_URL") or sys.exit(
        "needs a server: python3 -m throwaway.pgserver -- .venv/bin/python tools/pg_layer_cost.py"
    )
    template = _pgbench.template(pg)
    floor = _pgbench.floor_script(pg, template, "receipts")
    ours = _pgbench.ctrlrun_script(pg)
    variants = {
        "receipts floor": floor,
        "floor in plain PL/pgSQL functions": wrapped(pg, floor, definer=False),
        "floor in SECURITY DEFINER functions": wrapped(pg, floor, definer=True),
        "ctrlrun's SQL": ours,
        "ctrlrun's SQL without the durability steps": without_durability(pg, ours),
    }
    runs: dict = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name, script in variants.items():
            runs[name].append(server_us(pg, script, args.calls))
    print(f"{'server CPU per call, 1 client, prepared':<46} {'fastest':>9} {'median':>9}")
    for name, values in runs.items():
        print(f"{name:<46} {min(values):>6.0f} µs {statistics.median(values):>6.0f} µs")


if __name__ == "__main__":
    main()

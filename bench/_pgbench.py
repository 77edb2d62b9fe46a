"""pgbench for bench/throughput.py: a floor's statements (``_floor_sql.py``) or ctrlrun's own, read
off the wire, as a pgbench script run for a number of seconds; and what the in-process benchmarks
(retention, console, gateway, throughput) share: options, stores on each backend, timings."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple
from urllib.parse import unquote, urlsplit

import ctrlrun
from bench._cpu import CpuMeter
from bench._floor_sql import PgSql, pg_tables_sql
from throwaway.pgproxy import PgProxy
from throwaway.pgserver import _find_bin

KEY = "('tp-k' || CAST(:k AS text))"
ACT = "'act_0123456789abcdef0123456789abcdef'"
DIGEST = "'" + "d" * 64 + "'"
TOKEN, WRITER = "'tok_0123456789abcdef0123456789ab'", "'bench-1'"
# The values of ctrlrun's statements' parameters for a fresh call, in the order of
# src/store/postgres/sql.rs (``reserve``, ``transition_rows``): keep in step with it.
INSERT_VALUES = [KEY, "'executing'", ACT, "1", "NULL", "30000000", "NULL", "NULL", "NULL", TOKEN]
INSERT_VALUES += ["'bench.tp'", WRITER, DIGEST, '\'{"key": "x"}\'', "NULL", "'reservation'", WRITER]
OUTCOME_VALUES = ["'committed'", "ARRAY['executing']", "true", "'1'", "NULL", KEY, ACT, "1", "NULL"]
OUTCOME_VALUES += ["'outcome'", WRITER]
# The same for a floor's statements, by name
FLOOR_VALUES = {"key": KEY, "aid": ACT, "now": "1", "until": "30000000", "token": TOKEN}
FLOOR_VALUES.update(writer=WRITER, args=DIGEST, fields='\'{"key": "x"}\'', hash=DIGEST, prev=DIGEST)
FLOOR_VALUES.update(result="'1'")
HEAD = "\\set k random(1, 4000000000000000000)\n"
ROOT = Path(__file__).resolve().parent.parent


def bench_args(doc: str, **defaults: Any) -> argparse.Namespace:
    """``--json`` and an option per default (``--backends`` and the ``int``s of ``defaults``)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    for name, value in defaults.items():
        ap.add_argument("--" + name.replace("_", "-"), type=type(value), default=value)
    ap.add_argument("--json", default=None, help="also write the results here")
    return ap.parse_args()


def write_json(path: Optional[str], results: Any) -> None:
    if path:
        Path(path).write_text(json.dumps(results, indent=2))


def pg_server() -> str:
    """The server ``CTRLRUN_TEST_POSTGRES_URL`` names (``""``: none)."""
    return os.environ.get("CTRLRUN_TEST_POSTGRES_URL", "")


def schema_url(url: str, prefix: str) -> Tuple[str, str]:
    """``url`` with a new schema named ``prefix…``, and that schema."""
    schema = prefix + uuid.uuid4().hex[:8]
    return f"{url}{'&' if '?' in url else '?'}schema={schema}", schema


def backends(wanted: str, name: str) -> Iterator[Tuple[str, str, Optional[Tuple[str, str]]]]:
    """Each of ``wanted`` (``sqlite,postgres``): its name, a new store's URL (a file under
    ``bench/``; a schema of ``pg_server()``, left out without one) and, on PostgreSQL, the
    server's URL and the schema; each removed after."""
    if "sqlite" in wanted.split(","):
        tmp = tempfile.mkdtemp(prefix=f"ctrlrun-{name}-", dir=ROOT / "bench")
        try:
            yield "sqlite", f"sqlite:///{os.path.join(tmp, 'state.db')}?synchronous=FULL", None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    server = pg_server()
    if "postgres" in wanted.split(",") and server:
        url, schema = schema_url(server, f"bench_{name}_")
        try:
            ctrlrun.open_store(url).close()
            yield "postgres", url, (server, schema)
        finally:
            psql(server, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def median_ms(run: Callable[[], Any], repeats: int = 7) -> float:
    """The median time of ``run`` in ms, after one untimed run."""
    run()  # warm
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        run()
        times.append((time.perf_counter() - t) * 1000)
    return round(statistics.median(times), 2)


def _client(url: str, program: str) -> Tuple[Dict[str, str], List[str], str]:
    """The environment (the password travels there), ``program``'s connection arguments and
    the database name for ``url``."""
    u = urlsplit(url)
    env = dict(os.environ, PGPASSWORD=unquote(u.password or ""))
    host, port, user = (
        u.hostname or "127.0.0.1",
        str(u.port or 5432),
        unquote(u.username or "postgres"),
    )
    args = [_find_bin(program), "-h", host, "-p", port, "-U", user]
    return env, args, (u.path or "/postgres").lstrip("/") or "postgres"


def psql(url: str, sql: str) -> str:
    """What ``psql -At`` prints for ``sql``, which must succeed."""
    env, args, db = _client(url, "psql")
    command = [*args, "-d", db, "-v", "ON_ERROR_STOP=1", "-qAtc", sql]
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=3600)
    if run.returncode != 0:
        raise RuntimeError(f"psql failed: {run.stderr.strip()}")
    return run.stdout.strip()


def template(url: str) -> str:
    """A schema ctrlrun makes, whose tables the floors copy."""
    via, schema = schema_url(url, "ctrlrun_scratch_tpt_")
    ctrlrun.open_store(via).close()
    return schema


def ctrlrun_script(url: str) -> str:
    """A pgbench script of ctrlrun's own statements for a fresh call, as the store sends them
    (read off the wire through a proxy), on a schema of their own: what the server alone costs
    for ctrlrun's protocol, with no client work."""
    u = urlsplit(url)
    proxy = PgProxy(u.hostname or "127.0.0.1", u.port or 5432)
    try:
        auth = u.netloc.rsplit("@", 1)[0]
        via = f"postgresql://{auth}@{proxy.host}:{proxy.port}{u.path}?schema=ctrlrun_scratch_tps_{uuid.uuid4().hex[:8]}"
        store = ctrlrun.open_store(via)

        @ctrlrun.protect("bench.tp", effect="tp:{key}", store=store)
        def call(key: str) -> int:
            return 1

        call("one")
        store.close()
        bodies = [sql for _, sql in proxy.parsed]
    finally:
        proxy.close()
    # a fresh call is two calls of the schema's functions (see src/store/postgres/sql.rs)
    reserve = next(b for b in bodies if b".ctrlrun_reserve($1" in b).decode()
    outcome = next(b for b in bodies if b".ctrlrun_transition($1" in b).decode()

    def bind(body: str, values: List[str]) -> str:
        return re.sub(r"\$(\d+)", lambda m: values[int(m.group(1)) - 1], body)

    return f"{HEAD}{bind(reserve, INSERT_VALUES)};\n{bind(outcome, OUTCOME_VALUES)};\n"


def floor_script(url: str, template: str, variant: str) -> str:
    """A pgbench script of a floor's two autocommit statements for a fresh call (``autocommit``
    or ``receipts``), on tables of their own copied from ``template``."""
    schema = f"ctrlrun_scratch_tpf_{uuid.uuid4().hex[:8]}"
    psql(url, pg_tables_sql(schema, template, variant))
    sql = PgSql(schema)
    first, second = (
        (sql.insert_min, sql.outcome_min) if variant == "autocommit" else (sql.reserve, sql.outcome)
    )

    def bind(body: str) -> str:
        return re.sub(r"%\((\w+)\)s", lambda m: FLOOR_VALUES[m.group(1)], body)

    return f"{HEAD}{bind(first)};\n{bind(second)};\n"


def pgbench(
    url: str, clients: int, seconds: float, script: str, mode: str = "prepared"
) -> Dict[str, Any]:
    """pgbench running ``script`` (``-M mode``); the password travels in the environment."""
    env, base, db = _client(url, "pgbench")
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write(script)
    try:
        cpu = CpuMeter(children=True)
        threads = str(min(clients, 2))
        command = [*base, "-n", "-M", mode, "-c", str(clients), "-j", threads]
        command += ["-T", str(int(seconds))]
        run = subprocess.run(
            [*command, "-f", f.name, db], env=env, capture_output=True, text=True, check=True
        )
    finally:
        os.unlink(f.name)
    m = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", run.stdout)
    n = re.search(r"number of transactions actually processed: (\d+)", run.stdout)
    assert m and n, run.stdout + run.stderr
    return {"calls_per_s": float(m.group(1)), **cpu.per_call(int(n.group(1)))}

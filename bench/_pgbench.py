"""pgbench for bench/throughput.py: the two-statement floor, ctrlrun's own statements read
off the wire, and the receipts floor, each a pgbench script run for a number of seconds."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import uuid
from typing import Any, Dict, List, Tuple
from urllib.parse import unquote, urlsplit

from tests_py.support.pgproxy import PgProxy
from tests_py.support.pgserver import _find_bin

import ctrlrun
from bench._cpu import CpuMeter
from bench._floor_receipts import PgReceipts, pg_schema_sql

PGBENCH_SCRIPT = """\\set k random(1, 4000000000000000000)
INSERT INTO bench_tp (effect_key, state, action_id, attempt, created_at, updated_at, lease_expires_at) VALUES ('k' || :k, 'reserved', 'act', 1, 0, 0, 30000000) ON CONFLICT (effect_key) DO NOTHING;
UPDATE bench_tp SET state = 'committed', updated_at = 1, lease_expires_at = NULL, result = '1' WHERE effect_key = 'k' || :k AND action_id = 'act' AND attempt = 1 AND state = 'reserved';
"""


# The values of ctrlrun's statements' parameters for a fresh call, in the order of
# src/store/postgres/sql.rs (`reserve`, `transition_rows`): keep in step with it.
KEY = "('tp-k' || CAST(:k AS text))"
ACT = "'act_0123456789abcdef0123456789abcdef'"
INSERT_VALUES = [
    KEY,
    "'executing'",
    ACT,
    "1",
    "NULL",
    "30000000",
    "NULL",
    "NULL",
    "NULL",
    "'tok_0123456789abcdef0123456789ab'",
    "'bench.tp'",
    "'bench-1'",
    "'" + "d" * 64 + "'",
    '\'{"key": "x"}\'',
    "NULL",
    "'reservation'",
    "'bench-1'",
]
# The parameter types of the two functions (src/store/postgres/statements.rs INSERT_PARAMS,
# TRANSITION_PARAMS).
INSERT_TYPES = "text, text, text, int8, int8, int8, text, text, text, text, text, text, text, text, text, text, text"
OUTCOME_TYPES = "text, text[], bool, text, text, text, text, int8, int8, text, text"
OUTCOME_VALUES = [
    "'committed'",
    "ARRAY['executing']",
    "true",
    "'1'",
    "NULL",
    KEY,
    ACT,
    "1",
    "NULL",
    "'outcome'",
    "'bench-1'",
]


def _client(url: str, program: str) -> Tuple[Dict[str, str], List[str], str]:
    """The environment (the password travels there), ``program``'s connection arguments and
    the database name for ``url``."""
    u = urlsplit(url)
    env = dict(os.environ, PGPASSWORD=unquote(u.password or ""))
    args = [
        _find_bin(program),
        "-h",
        u.hostname or "127.0.0.1",
        "-p",
        str(u.port or 5432),
        "-U",
        unquote(u.username or "postgres"),
    ]
    return env, args, (u.path or "/postgres").lstrip("/") or "postgres"


def server_url(module: str) -> str:
    """The server a profiling script runs against (``CTRLRUN_TEST_POSTGRES_URL``), or exit
    saying how to start one."""
    url = os.environ.get("CTRLRUN_TEST_POSTGRES_URL")
    if not url:
        spec = getattr(sys.modules.get(module), "__spec__", None)  # run as -m: "__main__"
        name = spec.name if spec is not None else module
        sys.exit(f"needs a server: python3 tests_py/support/pgserver.py -- python -m {name}")
    return url


def _psql(url: str, sql: str) -> None:
    env, args, db = _client(url, "psql")
    subprocess.run([*args, "-d", db, "-qAtc", sql], env=env, check=True, capture_output=True)


def query(url: str, sql: str) -> str:
    """What ``psql -At`` prints for ``sql``."""
    env, args, db = _client(url, "psql")
    run = subprocess.run(
        [*args, "-d", db, "-qAtc", sql], env=env, check=True, capture_output=True, text=True
    )
    return run.stdout


def ctrlrun_script(url: str) -> str:
    """A pgbench script of ctrlrun's own statements for a fresh call, as the store sends them
    (read off the wire through the tests' proxy), on a schema of their own: what the server
    alone costs for ctrlrun's protocol, with no client work."""
    u = urlsplit(url)
    proxy = PgProxy(u.hostname or "127.0.0.1", u.port or 5432)
    try:
        schema = f"ctrlrun_scratch_tps_{uuid.uuid4().hex[:8]}"
        auth = u.netloc.rsplit("@", 1)[0]
        via = f"postgresql://{auth}@{proxy.host}:{proxy.port}{u.path}?schema={schema}"
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

    return (
        "\\set k random(1, 4000000000000000000)\n"
        + bind(reserve, INSERT_VALUES)
        + ";\n"
        + bind(outcome, OUTCOME_VALUES)
        + ";\n"
    )


def script_schema(script: str) -> str:
    """The scratch schema a ``ctrlrun_script`` runs in."""
    found = re.search(r'"(ctrlrun_scratch_tps_[0-9a-f]+)"', script)
    assert found, script
    return found.group(1)


def receipts_script(url: str) -> str:
    """A pgbench script of the receipts floor (``bench/_floor_receipts.py``) for a fresh call:
    the two autocommit statements that write what the issues require (the row with its columns
    and indexes, and each write's receipt in the same statement), on a schema of its own."""
    schema = f"ctrlrun_scratch_tpr_{uuid.uuid4().hex[:8]}"
    _psql(url, pg_schema_sql(schema))
    sql = PgReceipts(schema)
    digest = "'" + "d" * 64 + "'"
    values = {
        "key": "'k' || :k",
        "aid": ACT,
        "now": "1",
        "until": "30000000",
        "token": "'tok_0123456789abcdef0123456789ab'",
        "writer": "'bench-1'",
        "args": digest,
        "fields": '\'{"key": "x"}\'',
        "hash": digest,
        "prev": digest,
        "result": "'1'",
    }

    def bind(body: str) -> str:
        return re.sub(r"%\((\w+)\)s", lambda m: values[m.group(1)], body)

    return (
        "\\set k random(1, 4000000000000000000)\n"
        + bind(sql.reserve)
        + ";\n"
        + bind(sql.outcome)
        + ";\n"
    )


def pgbench(
    url: str,
    clients: int,
    seconds: float,
    script: str = PGBENCH_SCRIPT,
    mode: str = "prepared",
    extra: Tuple[str, ...] = (),
) -> Dict[str, Any]:
    """pgbench with the two statements; the password travels in the environment."""
    env, base, db = _client(url, "pgbench")
    _psql(
        url,
        "DROP TABLE IF EXISTS bench_tp; CREATE TABLE bench_tp ("
        "effect_key text PRIMARY KEY, state text NOT NULL, action_id text NOT NULL, "
        "attempt bigint NOT NULL, created_at bigint NOT NULL, updated_at bigint NOT "
        "NULL, lease_expires_at bigint, result text, error text, resolved_by text)",
    )
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write(script)
    try:
        cpu = CpuMeter(children=True)
        run = subprocess.run(
            [
                *base,
                "-n",
                "-M",
                mode,
                "-c",
                str(clients),
                "-j",
                str(min(clients, 2)),
                "-T",
                str(int(seconds)),
                *extra,
                "-f",
                f.name,
                db,
            ],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    finally:
        os.unlink(f.name)
    m = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", run.stdout)
    assert m, run.stdout + run.stderr
    n = re.search(r"number of transactions actually processed: (\d+)", run.stdout)
    assert n, run.stdout
    return {"calls_per_s": float(m.group(1)), **cpu.per_call(int(n.group(1)))}


def executed_script(script: str) -> str:
    """``ctrlrun_script``'s two calls as SQL-level prepared statements: each session
    ``PREPARE``s them once (the client variable ``prepared``, 0 from ``-D``, remembers it), then every call sends
    ``EXECUTE name(values)``: the statement parsed on each call is the ``EXECUTE``, and the
    plan is the one the session keeps."""
    lines = script.splitlines()
    first, calls = lines[0], [ln.rstrip(";") for ln in lines[1:] if ln.strip()]
    prepares, executes = [], []
    for i, (call, (types, values)) in enumerate(
        zip(calls, ((INSERT_TYPES, INSERT_VALUES), (OUTCOME_TYPES, OUTCOME_VALUES)))
    ):
        m = re.match(r"SELECT \* FROM ([^\s(]+)\(", call)
        assert m, call
        params = ", ".join(f"${n + 1}" for n in range(len(values)))
        name = f"bench_exec_{i}"
        prepares.append(f"PREPARE {name}({types}) AS SELECT * FROM {m.group(1)}({params});")
        executes.append(f"EXECUTE {name}({', '.join(values)});")
    return (
        "\n".join(
            [first, "\\if :prepared = 0", *prepares, "\\set prepared 1", "\\endif", *executes]
        )
        + "\n"
    )

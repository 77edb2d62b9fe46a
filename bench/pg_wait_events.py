"""What PostgreSQL's backends wait on while pgbench runs a fresh protected call with many
clients (issue 34, item 5): ctrlrun's own statements (``ctrlrun_script``) beside the receipts
floor (``receipts_script``) and the two-statement floor, each for ``--seconds`` under
``--clients`` clients, while another connection samples ``pg_stat_activity`` every 10 ms.

    python3 tests_py/support/pgserver.py -- python -m bench.pg_wait_events [--clients 8]
        [--seconds 6] [--perf]

Prints calls/s, the WAL written per call (the server's WAL position before and after, over
the calls pgbench counted), and, per workload, the share of the sampled backends in each state: on the CPU
(no wait event), or waiting on a named event (``LWLock:WALWrite``, ``IO:WALSync``,
``Lock:transactionid``, ...). A wait that the floors do not show is where ctrlrun's statements
lose throughput to contention rather than to work. With ``--perf``, each workload is also
recorded system-wide (``perf record -a -g`` for the middle of the run) into
``bench/.work/waits-<n>.perf``, for ``perf report --comm postgres``.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import threading
import time
from typing import Counter, Dict, Optional, Tuple

from bench._pgbench import (
    PGBENCH_SCRIPT,
    _client,
    ctrlrun_script,
    pgbench,
    query,
    receipts_script,
    server_url,
)

SAMPLE = (
    "SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') FROM pg_stat_activity "
    "WHERE backend_type = 'client backend' AND state = 'active' AND pid <> pg_backend_pid() "
    "AND application_name = 'pgbench';"
)


def sampled(url: str, stop: threading.Event, seen: Counter[str]) -> None:
    """Sample the active pgbench backends' wait events until ``stop`` (one psql session)."""
    env, args, db = _client(url, "psql")
    proc = subprocess.Popen(
        [*args, "-d", db, "-qAt"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("\\set QUIET on\n")
    try:
        while not stop.is_set():
            proc.stdin.write(SAMPLE + "SELECT 'end';\n")
            proc.stdin.flush()
            for line in proc.stdout:
                line = line.strip()
                if line == "end":
                    break
                if line:
                    seen[line] += 1
            time.sleep(0.01)
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)


def _record(path: str, seconds: float) -> None:
    """``perf record`` of the whole machine for the middle half of a run of ``seconds``."""
    time.sleep(seconds / 4)
    command = ["perf", "record", "-a", "-g", "-F", "999", "-o", path, "--"]
    subprocess.run([*command, "sleep", str(seconds / 2)], capture_output=True, check=True)


def _lsn(url: str) -> int:
    return int(float(query(url, "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").strip()))


def run(
    url: str, script: str, clients: int, seconds: float, perf: Optional[str] = None
) -> Tuple[float, float, Counter[str]]:
    """calls/s, WAL bytes per call, and the wait events seen; ``perf``: record there."""
    seen: Counter[str] = collections.Counter()
    stop = threading.Event()
    sampler = threading.Thread(target=sampled, args=(url, stop, seen))
    sampler.start()
    if perf:
        recorder = threading.Thread(target=_record, args=(perf, seconds))
        recorder.start()
    before = _lsn(url)
    try:
        out = pgbench(url, clients, seconds, script, "prepared")
    finally:
        stop.set()
        sampler.join()
        if perf:
            recorder.join()
    wal = (_lsn(url) - before) / (out["calls_per_s"] * int(seconds))
    return out["calls_per_s"], wal, seen


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--perf", action="store_true", help="also perf record each workload")
    args = ap.parse_args()
    pg = server_url(__name__)
    scripts: Dict[str, str] = {
        "ctrlrun's SQL": ctrlrun_script(pg),
        "receipts floor": receipts_script(pg),
        "two statements": PGBENCH_SCRIPT,
    }
    work = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".work")
    os.makedirs(work, exist_ok=True)
    for n, (name, script) in enumerate(scripts.items()):
        perf = os.path.join(work, f"waits-{n}.perf") if args.perf else None
        per_s, wal, seen = run(pg, script, args.clients, args.seconds, perf)
        total = sum(seen.values()) or 1
        top = ", ".join(f"{event} {n / total:.0%}" for event, n in seen.most_common(6))
        print(f"{name:<16} {per_s:>7,.0f} calls/s {wal:>8,.0f} WAL bytes/call  {top}", flush=True)


if __name__ == "__main__":
    main()

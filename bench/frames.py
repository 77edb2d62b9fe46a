"""Where a protected call's SQLite writes go: WAL frames and B-tree pages per transaction.

    python -m bench.frames [--n 500] [--prefill 2000] [--synchronous NORMAL] [--json PATH]

Counts, not timings. For each design (``ctrlrun``: ``@ctrlrun.protect`` on a SQLite store;
``floor-min``, ``floor-receipts``: the floors of ``_floor_sql.py``): ``--prefill`` calls on fresh
keys, the WAL emptied (``wal_checkpoint(TRUNCATE)``) and held by a read transaction of another
connection (no checkpoint can back-fill or restart it: every frame stays, in order), then
``--n`` calls, the WAL's frame count noted before each call, when the executor runs and after,
so that each frame is attributed to the reservation or the outcome. Then every frame's header
is read (page number, commit marker, salts) and each page's B-tree named from ``dbstat``
(``sqlite_schema`` for page 1, whose header holds the file's page count). A frame is one page
image (page size + 24 bytes): a transaction writes each dirty page once.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import os
import shutil
import sqlite3
import struct
import subprocess
import sys
import tempfile
from typing import Any, Callable, Dict, List, Optional, Tuple

from bench import _floor_sql
from bench._pgbench import write_json

TXNS = ("reservation", "outcome")

# Run by the holding process: checkpoint the WAL away, then hold a snapshot until told.
_HOLDER = """
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30.0)
busy, log, done = c.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
assert busy == 0 and log == done, (busy, log, done)
c.execute("BEGIN")
c.execute("SELECT count(*) FROM sqlite_schema").fetchone()
print("held", flush=True)
sys.stdin.readline()
c.execute("COMMIT")
"""


def key(prefix: str, i: int) -> str:
    """The i-th fresh key: spread over the key space, as real keys are (not appended in order)."""
    return prefix + hashlib.sha256(f"{prefix}{i}".encode()).hexdigest()[:16]


class Wal:
    """The WAL of one database file, read by frame count (it only grows while held)."""

    def __init__(self, db: str) -> None:
        self.db = db
        self.path = db + "-wal"
        self.holder: Optional[subprocess.Popen] = None
        with open(db, "rb") as f:  # the file header's page size (1 means 65536)
            size = struct.unpack(">H", f.read(100)[16:18])[0]
        self.page_size = 65536 if size == 1 else size

    def frames(self) -> int:
        try:
            size = os.path.getsize(self.path)
        except FileNotFoundError:
            return 0
        return max(0, (size - 32) // (self.page_size + 24))

    def hold(self) -> None:
        """Empty the WAL, then keep a read transaction open so nothing checkpoints it.

        In another process: SQLite's locks are POSIX advisory locks, which never conflict
        within one process, and the extension links its own SQLite beside the stdlib's."""
        self.holder = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, self.db],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.holder.stdout is not None
        line = self.holder.stdout.readline().strip()
        assert line == "held", line
        assert self.frames() == 0, self.frames()

    def release(self) -> None:
        if self.holder is not None:
            self.holder.communicate("done\n")
            assert self.holder.returncode == 0, self.holder.returncode
            self.holder = None

    def read_frames(self) -> List[Tuple[int, int]]:
        """Every frame of the current WAL generation: (page number, commit size or 0)."""
        with open(self.path, "rb") as f:
            data = f.read()
        magic, _, page_size, _, salt1, salt2 = struct.unpack(">6I", data[:24])
        assert magic in (0x377F0682, 0x377F0683) and page_size == self.page_size
        out = []
        step = page_size + 24
        for off in range(32, len(data) - step + 1, step):
            pgno, commit, s1, s2 = struct.unpack(">4I", data[off : off + 16])
            if (s1, s2) != (salt1, salt2):
                raise AssertionError(f"frame at {off} is of another WAL generation")
            out.append((pgno, commit))
        return out

    def btrees(self) -> Dict[int, Tuple[str, str]]:
        """Page number -> (B-tree name, page type), as the file is now."""
        with sqlite3.connect(self.db) as c:
            rows = c.execute("SELECT pageno, name, pagetype FROM dbstat").fetchall()
        return {p: (n, t) for p, n, t in rows}


# -- the designs: each a function that opens a store under `path` and returns `call(key, mark)`:
# one protected call on a fresh key, calling `mark()` once between its two transactions.

Call = Callable[[str, Callable[[], None]], None]


def ctrlrun_design(path: str, sync: str) -> Tuple[Call, Callable[[], None]]:
    import ctrlrun

    store = ctrlrun.open_store(f"sqlite:///{path}?synchronous={sync.lower()}")
    state: Dict[str, Any] = {}

    @ctrlrun.protect("bench.effect", effect="bench:{key}", store=store)
    def effect(key: str) -> int:
        state["mark"]()
        return 1

    def call(key: str, mark: Callable[[], None]) -> None:
        state["mark"] = mark
        assert effect(key) == 1

    return call, store.close


def floor_design(variant: str) -> Callable[[str, str], Tuple[Call, Callable[[], None]]]:
    def open_floor(path: str, sync: str) -> Tuple[Call, Callable[[], None]]:
        template = os.path.join(os.path.dirname(path), "template.db")
        if not os.path.exists(template):  # the floors' tables are copied from a store ctrlrun made
            import ctrlrun

            ctrlrun.open_store(f"sqlite:///{template}").close()
        conn = sqlite3.connect(path, isolation_level=None, timeout=30.0)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={sync}")
        _floor_sql.sqlite_tables(conn, template, variant)

        def call(key: str, mark: Callable[[], None]) -> None:
            done: List[int] = []

            def step(body):
                if done:  # the second transaction: the first has committed
                    mark()
                done.append(1)
                return _floor_sql.sqlite_txn(conn, body)

            assert _floor_sql.drive(_floor_sql.sqlite_steps(conn, variant, key, lambda: 1), step)

        return call, conn.close

    return open_floor


DESIGNS: Dict[str, Callable[[str, str], Tuple[Call, Callable[[], None]]]] = {
    "ctrlrun": ctrlrun_design,
    "floor-min": floor_design("min"),
    "floor-receipts": floor_design("receipts"),
}


def measure(name: str, workdir: str, n: int, prefill: int, sync: str) -> Dict[str, Any]:
    path = os.path.join(workdir, f"frames-{name}.db")
    call, close = DESIGNS[name](path, sync)
    try:
        for i in range(prefill):
            call(key("p", i), lambda: None)
        wal = Wal(path)
        wal.hold()
        bounds: List[Tuple[int, int, int]] = []
        try:
            for i in range(n):
                before = wal.frames()
                mid: List[int] = []
                call(key("m", i), lambda mid=mid: mid.append(wal.frames()))
                assert len(mid) == 1, "the executor ran once"
                bounds.append((before, mid[0], wal.frames()))
            frames = wal.read_frames()
        finally:
            wal.release()
    finally:
        close()
    pages = wal.btrees()  # once the store is closed (see `Wal.hold`)
    assert len(frames) == bounds[-1][2], (len(frames), bounds[-1][2])
    commits = [i + 1 for i, (_, c) in enumerate(frames) if c]
    per_txn: Dict[str, Dict[str, Any]] = {}
    for t, txn in enumerate(TXNS):
        counts, kinds, interior = (collections.Counter() for _ in range(3))
        total = distinct = 0
        for b in bounds:
            lo, hi = b[t], b[t + 1]
            assert hi > lo and hi in commits, f"{txn}: frames {lo}..{hi} are not one commit"
            txn_pages = [frames[j][0] for j in range(lo, hi)]
            total, distinct = total + len(txn_pages), distinct + len(set(txn_pages))
            for p in set(txn_pages):
                btree, kind = pages.get(p, ("(freelist)", "free"))
                counts[btree], kinds[kind] = counts[btree] + 1, kinds[kind] + 1
                if kind == "internal":
                    interior[btree] += 1
        per = lambda c: {k: v / n for k, v in sorted(c.items())}  # noqa: E731
        per_txn[txn] = {"frames": total / n, "pages": distinct / n, "by_btree": per(counts)}
        per_txn[txn].update(by_type=per(kinds), interior_by_btree=per(interior))
    out = {"design": name, "n": n, "prefill": prefill, "page_size": wal.page_size}
    out.update(commits_per_call=len(commits) / n, frames_per_call=len(frames) / n)
    return {**out, "wal_bytes_per_call": len(frames) * (wal.page_size + 24) / n, "txns": per_txn}


def table(results: List[Dict[str, Any]]) -> str:
    floor = {r["design"]: r["frames_per_call"] for r in results}.get("floor-min")
    lines = ["design            txn          frames  pages  B-trees written (pages per txn)"]
    for r in results:
        for txn in TXNS:
            t = r["txns"][txn]
            inner = t["interior_by_btree"]
            trees = ", ".join(
                f"{k} {v:.2f}" + (f" ({inner[k]:.2f} interior)" if k in inner else "")
                for k, v in t["by_btree"].items()
            )
            lines.append(
                f"{r['design']:<17} {txn:<12} {t['frames']:>6.2f} {t['pages']:>6.2f}  {trees}"
            )
        vs = f" ({r['frames_per_call'] / floor:.2f}x floor-min)" if floor else ""
        lines.append(
            f"{r['design']:<17} {'call':<12} {r['frames_per_call']:>6.2f} {'':>6}  "
            f"{r['commits_per_call']:.0f} commits, {r['wal_bytes_per_call'] / 1024:.1f} KiB "
            f"of WAL{vs}"
        )
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.frames", description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=500, help="measured calls per design")
    ap.add_argument("--prefill", type=int, default=2000, help="calls made before measuring")
    ap.add_argument("--synchronous", default="NORMAL", choices=("NORMAL", "FULL"))
    ap.add_argument("--designs", default=",".join(DESIGNS), help="comma-separated")
    ap.add_argument("--workdir", help="where the SQLite files go (default: a temporary dir)")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    workdir = args.workdir or tempfile.mkdtemp(prefix="ctrlrun-frames-")
    os.makedirs(workdir, exist_ok=True)
    try:
        results = [
            measure(d, workdir, args.n, args.prefill, args.synchronous)
            for d in args.designs.split(",")
        ]
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"SQLite WAL, synchronous={args.synchronous}, {args.n} calls after {args.prefill}")
    print(table(results))
    write_json(args.json, results)


if __name__ == "__main__":
    main()

"""The benchmark's report: the tables of bench/run.py's measurements and the targets of issues 6,
14 and 34, each a ratio of medians from the same run (see bench/README.md)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from bench._measures import Measures, ratio

TITLES = {
    "sqlite": "SQLite (WAL)",
    "postgres": "PostgreSQL (synchronous_commit=on)",
    "pgbouncer": "PostgreSQL through PgBouncer (transaction mode, synchronous_commit=on)",
}
LATENCY_HEAD = "workload,durability,calls/s (1/p50),calls/s (N/wall),p50 us,p50 of runs,p99 us,client cpu us/call,{io},time/call vs floor,speed vs original"
# Each target: what it checks | the figure measured | the figure it is divided by | the goal
# (``info``: none). A figure is ``p50``, ``mean`` or ``total`` of a row id (``@backend``: of
# another backend's row). ``async``: the async targets (``Measures.async_targets``).
TARGETS = {
    "sqlite": """
protected calls/s vs the original (both NORMAL) | p50 ref.sync.NORMAL | p50 ctrlrun.sync.NORMAL | >= 10x
protected calls/s vs the original (ours FULL, theirs NORMAL) | p50 ref.sync.NORMAL | p50 ctrlrun.sync.FULL | info
time/call vs engine floor, NORMAL (2 txns) | p50 ctrlrun.sync.NORMAL | p50 floor.min.NORMAL | <= 1.5x
time/call vs engine floor, FULL (2 txns) | p50 ctrlrun.sync.FULL | p50 floor.min.FULL | <= 1.2x
time/call vs floor with ctrlrun's statements, NORMAL | p50 ctrlrun.sync.NORMAL | p50 floor.same.NORMAL | info
the receipts floor vs engine floor, NORMAL (the part of the target receipts, columns and indexes take) | p50 floor.receipts.NORMAL | p50 floor.min.NORMAL | info
time/call vs floor with receipts and indexes, NORMAL | p50 ctrlrun.sync.NORMAL | p50 floor.receipts.NORMAL | info
time/call vs floor with ctrlrun's statements, FULL | p50 ctrlrun.sync.FULL | p50 floor.same.FULL | info
the receipts floor vs engine floor, FULL (the part of the target receipts, columns and indexes take) | p50 floor.receipts.FULL | p50 floor.min.FULL | info
time/call vs floor with receipts and indexes, FULL | p50 ctrlrun.sync.FULL | p50 floor.receipts.FULL | info
async | .NORMAL | , NORMAL | <= 1.5x | min receipts
async | .FULL | , FULL | info | min receipts
contention total time vs floor, FULL (2 txns) | total contend.ctrlrun.FULL | total contend.floor.min.FULL | <= 1.5x
contention total time vs floor, NORMAL (2 txns) | total contend.ctrlrun.NORMAL | total contend.floor.min.NORMAL | <= 1.5x
""",
    "postgres": """
protected calls/s vs the original | p50 ref.sync | p50 ctrlrun.sync | >= 10x
time/call vs raw-driver floor (2 txns) | p50 ctrlrun.sync | p50 floor.min | <= 1.3x
time/call vs 2 autocommit statements floor, p50 | p50 ctrlrun.sync | p50 floor.auto | <= 1.3x
time/call vs 2 autocommit statements floor, mean | mean ctrlrun.sync | mean floor.auto | <= 1.3x
prepared_statements=on: time/call vs 2 autocommit statements, p50 | p50 ctrlrun.sync.prepared | p50 floor.auto | <= 1.3x
prepared_statements=on: time/call vs 2 autocommit statements, mean | mean ctrlrun.sync.prepared | mean floor.auto | <= 1.3x
prepared_statements=on: async p50 / sync p50 | p50 ctrlrun.async.prepared | p50 ctrlrun.sync.prepared | <= 1.2x
prepared_statements=on: duplicate vs one indexed read | p50 dup.ctrlrun.prepared | p50 dup.floor | <= 1.5x
time/call vs raw-driver floor with ctrlrun's statements | p50 ctrlrun.sync | p50 floor.same | info
the receipts floor vs 2 autocommit statements floor (the part of the target receipts, columns and indexes take) | p50 floor.receipts | p50 floor.auto | info
time/call vs floor with receipts and indexes | p50 ctrlrun.sync | p50 floor.receipts | info
time/call vs floor with receipts and indexes, unprepared (as a client that may be behind a pooler sends them) | p50 ctrlrun.sync | p50 floor.receipts.unprepared | info
async |  |  | <= 1.2x | auto receipts
contention total time vs floor (2 txns) | total contend.ctrlrun | total contend.floor.min | <= 1.5x
duplicate path vs one unprepared indexed read | p50 dup.ctrlrun | p50 dup.floor.unprepared | <= 1.5x
""",
    "pgbouncer": """
time/call vs the unprepared psycopg floor, both via PgBouncer | p50 ctrlrun.sync | p50 floor.min | <= 1.3x
time/call via PgBouncer vs ctrlrun direct (the pooler's hop) | p50 ctrlrun.sync | p50 ctrlrun.sync@postgres | info
contention total time vs floor (2 txns), both via PgBouncer | total contend.ctrlrun | total contend.floor.min | <= 1.5x
""",
}
CONTENTION_HEAD = "contention,durability,total s (median),all runs s,executions,doubles (all runs),errors,every key exactly once,vs floor 2 txns"


def fmt_ratio(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.2f}x"


def fmt_num(x: Optional[float], digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def table(headers: List[str], rows: List[List[str]], align: str) -> str:
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]

    def line(cells: List[str]) -> str:
        return "  ".join(
            c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(cells, widths, align)
        ).rstrip()

    return "\n".join([line(headers), "  ".join("-" * w for w in widths), *(line(r) for r in rows)])


def latency_rows(
    m: Measures, specs: List[Any], syscalls: Dict[str, Dict[str, float]]
) -> List[List[str]]:
    rows = []
    for s in specs:
        med, b = s.median(), s.backend
        if s.kind == "contention" or med is None:
            continue
        extra = ""
        if b == "sqlite" and s.id in syscalls:
            extra = f"{syscalls[s.id]['fsync_per_call']:.2f}"
        elif b == "postgres" and "server_commits_per_call" in med:
            extra = f"{med['server_commits_per_call']:.2f} / {med['wal_syncs_per_call']:.2f}"
        p50 = med["p50_us"]
        floor = f"floor.min.{s.durability}" if b == "sqlite" else "floor.min"
        vs_floor = ratio(p50, m.p50(b, "dup.floor" if s.kind in ("dup", "read") else floor))
        vs_ref = None
        if s.kind == "latency" and s.who == "ctrlrun" and b != "pgbouncer":
            vs_ref = ratio(m.p50(b, "ref.sync.NORMAL" if b == "sqlite" else "ref.sync"), p50)
        if s.kind == "dup" and s.who == "ctrlrun":
            vs_ref = ratio(m.p50(b, "dup.ref"), p50)
        p50s = [r["p50_us"] for r in s.results]
        cells = [s.label, s.durability, fmt_num(med["per_s"], 0), fmt_num(med["per_s_wall"], 0)]
        cells += [fmt_num(p50), f"{min(p50s):,.0f}-{max(p50s):,.0f}", fmt_num(med["p99_us"])]
        cells += [fmt_num(med["cpu_us_per_call"]), extra, fmt_ratio(vs_floor), fmt_ratio(vs_ref)]
        rows.append(cells)
    return rows


def contention_rows(m: Measures, specs: List[Any], keys: int) -> List[List[str]]:
    rows = []
    for s in specs:
        med = s.median()
        if s.kind != "contention" or med is None:
            continue
        floor = "contend.floor.min" + (f".{s.durability}" if s.backend == "sqlite" else "")
        fl = m.total(s.backend, floor)
        runs = ", ".join(f"{r['total_s']:.3f}" for r in s.results)
        cells = [
            s.label,
            s.durability,
            f"{med['total_s']:.3f}",
            runs,
            f"{med['executions']}/{keys}",
        ]
        doubles, errors = (sum(r[k] for r in s.results) for k in ("double_executions", "errors"))
        cells += [str(doubles), str(errors)]
        once = "yes" if all(r["exactly_once"] for r in s.results) else "NO"
        rows.append([*cells, once, fmt_ratio(ratio(med["total_s"], fl))])
    return rows


def report(
    bench: Any, syscalls: Dict[str, Dict[str, float]], contention_keys: int
) -> Tuple[str, Dict[str, Any], bool]:
    """The text of every table, the targets, and whether every contention run of ctrlrun ran
    each key exactly once. ``bench`` is run.py's ``Bench``, measured."""
    m = Measures(bench)
    out: List[str] = []
    all_once = True
    for backend, title in TITLES.items():
        specs = [s for s in bench.specs if s.backend == backend]
        if not specs:
            continue
        n = bench.n_sqlite if backend == "sqlite" else bench.n_pg
        out += ["", f"== {title}: {n} calls per run, {bench.repeats} runs, the median run shown =="]
        if backend == "pgbouncer":
            out.append(
                "  Through the pooler the floors send every statement unnamed (psycopg with "
                "prepare_threshold=None): a prepared one would not be there on the next server connection."
            )
        io = "fsync/call" if backend == "sqlite" else "commits/WAL syncs per call"
        head = LATENCY_HEAD.format(io=io).split(",")
        out.append(table(head, latency_rows(m, specs, syscalls), "llrrrrrrrrr"))
        out.append(
            "  time/call vs floor: p50 / p50 of the 2-txn floor at the same durability (duplicate rows: / one "
            "indexed read).\n  speed vs original: the original's p50 / this p50 (original at its default, "
            "NORMAL on SQLite)."
        )
        crows = contention_rows(m, specs, contention_keys)
        if crows:
            out += ["", table(CONTENTION_HEAD.split(","), crows, "llrrrrrlr")]
        m.checks(backend, TARGETS[backend])
        cont = [s for s in specs if s.kind == "contention"]
        ours = [r for s in cont if s.who == "ctrlrun" for r in s.results]
        ok = all(r["exactly_once"] and r["errors"] == 0 for r in ours)
        all_once = all_once and all(
            r["exactly_once"] and r["errors"] == 0 for s in cont for r in s.results
        )
        doubles = sum(r["double_executions"] for s in cont for r in s.results)
        note = f"doubles across all contention rows incl. floor/original: {doubles}"
        mine = float(sum(r["double_executions"] for r in ours))
        name = "contention: every key exactly one winner (ctrlrun, all runs)"
        m.target(backend, name, mine, "0 doubles", ok if ours else None, note)
        dup = m.p50(backend, "dup.ctrlrun"), m.p50(backend, "dup.floor")
        m.check(backend, "duplicate path time/call vs one indexed read", *dup, "<= 1.5x")

    def measured(t: Dict[str, Any]) -> str:
        if t["measured"] is None:
            return "-"
        return f"{t['measured']:.0f}" if t["goal"] == "0 doubles" else f"{t['measured']:.2f}x"

    trows = [[t["backend"], t["check"], measured(t), t["goal"], t["verdict"]] for t in m.targets]
    out += [
        "",
        "== Targets (medians of the runs; ratios of p50 time per call, or of total time) ==",
    ]
    out.append(table(["backend", "check", "measured", "goal", "verdict"], trows, "llrll"))
    return "\n".join(out), {"targets": m.targets}, all_once

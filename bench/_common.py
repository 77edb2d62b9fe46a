"""Helpers shared by the benchmark's workers (stdlib only: each worker runs under its own venv).

A worker is started as ``python <worker>.py '<json config>'`` and prints its answer as one JSON
line, the last line of its stdout. Contention workers first print ``ready``, then wait for a
line on stdin holding the start time (epoch seconds).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import resource
import struct
import sys
import time
from typing import Any, Callable, Dict, List


def config() -> Dict[str, Any]:
    return json.loads(sys.argv[1])


def answer(obj: Dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def percentile(sorted_ns: List[int], q: float) -> int:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_ns:
        return 0
    return sorted_ns[min(max(1, math.ceil(q / 100.0 * len(sorted_ns))), len(sorted_ns)) - 1]


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def summarize(samples_ns: List[int], wall_ns: int, cpu_s: float) -> Dict[str, Any]:
    """Per-call statistics of one timed run: ``per_s`` is 1/p50 (the median call),
    ``per_s_wall`` calls / wall time of the loop."""
    s, n = sorted(samples_ns), len(samples_ns)
    p50 = percentile(s, 50)
    out = {"n": n, **{f"p{q}_us": percentile(s, q) / 1000.0 for q in (50, 90, 99)}}
    out.update(max_us=(s[-1] / 1000.0) if s else 0.0, mean_us=(sum(s) / n / 1000.0) if n else 0.0)
    out.update(wall_s=wall_ns / 1e9, per_s=(1e9 / p50) if p50 else 0.0)
    out.update(per_s_wall=(n / (wall_ns / 1e9)) if wall_ns else 0.0)
    return {**out, "cpu_us_per_call": (cpu_s * 1e6 / n) if n else 0.0}


def time_calls(call: Callable[[int], Any], n: int, warmup: int) -> Dict[str, Any]:
    """Warm up with ``warmup`` calls (indices -warmup..-1), then time ``n`` calls one by one."""
    for i in range(-warmup, 0):
        call(i)
    samples, clock, cpu0 = [0] * n, time.perf_counter_ns, cpu_seconds()
    start = clock()
    for i in range(n):
        t0 = clock()
        call(i)
        samples[i] = clock() - t0
    return summarize(samples, clock() - start, cpu_seconds() - cpu0)


async def time_calls_async(call: Callable[[int], Any], n: int, warmup: int) -> Dict[str, Any]:
    """As :func:`time_calls`, awaiting ``call(i)`` one at a time on the running loop."""
    for i in range(-warmup, 0):
        await call(i)
    samples, clock, cpu0 = [0] * n, time.perf_counter_ns, cpu_seconds()
    start = clock()
    for i in range(n):
        t0 = clock()
        await call(i)
        samples[i] = clock() - t0
    return summarize(samples, clock() - start, cpu_seconds() - cpu0)


def time_refusals(call, refused, key, n: int, warmup: int) -> Dict[str, Any]:
    """Commit every key first (not timed), then time a second call of each, which must be
    refused with the exception ``refused``."""
    for i in range(-warmup, n):
        call(key(i))
    count = [0]

    def again(i: int) -> None:
        try:
            call(key(i))
        except refused:
            count[0] += 1
            return
        raise AssertionError(f"a committed key ran again: {key(i)}")

    return {**time_calls(again, n, warmup), "refused": count[0]}


def run_mode(cfg: Dict[str, Any], effect: Callable, effect_async: Callable, refused) -> dict:
    """What ``cfg["mode"]`` asks of the protected ``effect`` (``effect_async``: awaited)."""
    mode, n, warmup = cfg["mode"], int(cfg.get("n", 0)), int(cfg.get("warmup", 0))
    key = lambda i: f"{cfg.get('prefix', 'k')}{i}"  # noqa: E731
    if mode == "init":
        return {"ok": True}
    if mode == "latency" and cfg.get("async"):
        return asyncio.run(time_calls_async(lambda i: effect_async(key(i)), n, warmup))
    if mode == "latency":
        return time_calls(lambda i: effect(key(i)), n, warmup)
    if mode == "dup":
        return time_refusals(effect, refused, key, n, warmup)
    if mode == "contend":
        return contend(effect, cfg["keys"], refused)
    raise SystemExit(f"unknown mode {mode!r}")


# -- contention ---------------------------------------------------------------------------


def mark(marks: str, key: str) -> None:
    """Record one execution of ``key``'s executor as a new file (O_CREAT|O_EXCL)."""
    name = f"{key}.{os.getpid()}.{time.perf_counter_ns()}"
    os.close(os.open(os.path.join(marks, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))


def contend(call, keys, lost=()) -> dict:
    """One contention process: say ``ready``, sleep until the start time read from stdin, then
    ``call(key)`` on every key in order (won unless it returns False or raises one of ``lost``;
    another exception is an error)."""
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    time.sleep(max(0.0, float(sys.stdin.readline()) - time.time()))
    won, errors = 0, []
    for key in keys:
        try:
            won += call(key) is not False
        except lost:
            pass
        except Exception as exc:  # reported; the parent fails the row
            errors.append(f"{key}: {type(exc).__name__}: {exc}")
    n_lost = len(keys) - won - len(errors)
    out = {"won": won, "lost": n_lost, "errors": errors[:5], "n_errors": len(errors)}
    return {**out, "end": time.time()}


# -- which build ---------------------------------------------------------------------------


def build_profile(so_path: str) -> str:
    """``release`` (no DWARF), ``debug`` (a ``.debug_info`` section: maturin develop without
    --release), or ``unknown`` (not a 64-bit little-endian ELF file)."""
    try:
        with open(so_path, "rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4:6] != b"\x02\x01":
                return "unknown"
            shoff = struct.unpack_from("<Q", head, 0x28)[0]
            shentsize, shnum, shstrndx = struct.unpack_from("<HHH", head, 0x3A)
            f.seek(shoff)
            table = f.read(shentsize * shnum)
            names = [struct.unpack_from("<I", table, i * shentsize)[0] for i in range(shnum)]
            str_off, str_size = struct.unpack_from("<QQ", table, shstrndx * shentsize + 24)
            f.seek(str_off)
            strtab = f.read(str_size)
    except (OSError, struct.error):
        return "unknown"
    found = {strtab[i : strtab.find(b"\0", i)] for i in names}
    return "debug" if b".debug_info" in found else "release"

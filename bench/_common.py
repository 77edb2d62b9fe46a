"""Helpers shared by the benchmark's workers (stdlib only: each worker runs under its own venv).

A worker is started as ``python <worker>.py '<json config>'`` and prints its answer as one JSON
line, the last line of its stdout. Contention workers first print ``ready``, then wait for a
line on stdin holding the start time (epoch seconds).
"""

from __future__ import annotations

import json
import math
import os
import resource
import struct
import sys
import time
from typing import Any, Callable, Dict, List, Optional


def config() -> Dict[str, Any]:
    return json.loads(sys.argv[1])


def answer(obj: Dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def percentile(sorted_ns: List[int], q: float) -> int:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_ns:
        return 0
    rank = max(1, math.ceil(q / 100.0 * len(sorted_ns)))
    return sorted_ns[min(rank, len(sorted_ns)) - 1]


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def summarize(samples_ns: List[int], wall_ns: int, cpu_s: float) -> Dict[str, Any]:
    """Per-call statistics of one timed run.

    ``per_s`` is 1/p50 (the median call); ``per_s_wall`` is calls / wall time of the loop."""
    s = sorted(samples_ns)
    n = len(s)
    p50 = percentile(s, 50)
    return {
        "n": n,
        "p50_us": p50 / 1000.0,
        "p90_us": percentile(s, 90) / 1000.0,
        "p99_us": percentile(s, 99) / 1000.0,
        "max_us": (s[-1] / 1000.0) if s else 0.0,
        "mean_us": (sum(s) / n / 1000.0) if n else 0.0,
        "wall_s": wall_ns / 1e9,
        "per_s": (1e9 / p50) if p50 else 0.0,
        "per_s_wall": (n / (wall_ns / 1e9)) if wall_ns else 0.0,
        "cpu_us_per_call": (cpu_s * 1e6 / n) if n else 0.0,
    }


def time_calls(call: Callable[[int], Any], n: int, warmup: int) -> Dict[str, Any]:
    """Warm up with ``warmup`` calls (indices -warmup..-1), then time ``n`` calls one by one."""
    for i in range(-warmup, 0):
        call(i)
    samples = [0] * n
    clock = time.perf_counter_ns
    cpu0 = cpu_seconds()
    start = clock()
    for i in range(n):
        t0 = clock()
        call(i)
        samples[i] = clock() - t0
    wall = clock() - start
    return summarize(samples, wall, cpu_seconds() - cpu0)


async def time_calls_async(call: Callable[[int], Any], n: int, warmup: int) -> Dict[str, Any]:
    """As :func:`time_calls`, awaiting ``call(i)`` one at a time on the running loop."""
    for i in range(-warmup, 0):
        await call(i)
    samples = [0] * n
    clock = time.perf_counter_ns
    cpu0 = cpu_seconds()
    start = clock()
    for i in range(n):
        t0 = clock()
        await call(i)
        samples[i] = clock() - t0
    wall = clock() - start
    return summarize(samples, wall, cpu_seconds() - cpu0)


# -- contention ---------------------------------------------------------------------------


def wait_for_start() -> float:
    """Say ``ready``, read the agreed start time from stdin, sleep until it."""
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    start_at = float(sys.stdin.readline())
    delay = start_at - time.time()
    if delay > 0:
        time.sleep(delay)
    return start_at


def mark(marks: str, key: str) -> None:
    """Record one execution of ``key``'s executor as a new file (O_CREAT|O_EXCL)."""
    name = f"{key}.{os.getpid()}.{time.perf_counter_ns()}"
    fd = os.open(os.path.join(marks, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    os.close(fd)


# -- which build ---------------------------------------------------------------------------


def elf_sections(path: str) -> Optional[List[str]]:
    """Section names of a 64-bit little-endian ELF file, or None if it is not one."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                return None
            e_shoff = struct.unpack_from("<Q", head, 0x28)[0]
            e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", head, 0x3A)
            f.seek(e_shoff)
            table = f.read(e_shentsize * e_shnum)
            headers = [
                struct.unpack_from("<IIQQQQ", table, i * e_shentsize) for i in range(e_shnum)
            ]
            _, _, _, _, str_off, str_size = headers[e_shstrndx]
            f.seek(str_off)
            strtab = f.read(str_size)
            names = []
            for h in headers:
                start = h[0]
                end = strtab.find(b"\0", start)
                names.append(strtab[start:end].decode("ascii", "replace"))
            return names
    except (OSError, struct.error, IndexError):
        return None


def build_profile(so_path: str) -> str:
    """``release`` (no DWARF), ``debug`` (DWARF present: maturin develop without --release),
    or ``unknown``."""
    names = elf_sections(so_path)
    if names is None:
        return "unknown"
    return "debug" if ".debug_info" in names else "release"


def contend(call, keys) -> dict:
    """One contention process: wait for the start, then ``call(key)`` (True: won) on every key
    in order."""
    wait_for_start()
    won = lost = 0
    errors = []
    for key in keys:
        try:
            if call(key):
                won += 1
            else:
                lost += 1
        except Exception as exc:
            errors.append(f"{key}: {type(exc).__name__}: {exc}")
    return {
        "won": won,
        "lost": lost,
        "errors": errors[:5],
        "n_errors": len(errors),
        "end": time.time(),
    }

"""Running the benchmark's workers: one measurement in its own subprocess (``run_worker``), and
``CONTENTION_PROCS`` processes released together over the same keys (``run_contention``); and
their venvs: the original product (``bench/.ref-venv``) and the floors' psycopg
(``bench/.floor-venv``), made on first use from the base interpreter (``ensure_venv``)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
CTRLRUN_WORKER = os.path.join(BENCH, "_ctrlrun_worker.py")
REF_WORKER = os.path.join(BENCH, "_ref_worker.py")
FLOOR_WORKER = os.path.join(BENCH, "_floor_worker.py")

REF_VENV = os.path.join(BENCH, ".ref-venv")
FLOOR_VENV = os.path.join(BENCH, ".floor-venv")
REF_VERSION = "0.12.2"
PSYCOPG = "psycopg[binary]==3.3.9"
CONTENTION_PROCS = 8
CONTENTION_KEYS = 200
WORKER_TIMEOUT = 1800


def log(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


class WorkerError(RuntimeError):
    pass


def run_worker(
    python: str, script: str, cfg: Dict[str, Any], prefix: Optional[List[str]] = None
) -> Dict[str, Any]:
    cmd = [*(prefix or []), python, script, json.dumps(cfg)]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=WORKER_TIMEOUT, cwd=cfg.get("cwd") or None
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    if proc.returncode != 0 or not lines:
        raise WorkerError(
            f"{os.path.basename(script)} {cfg.get('mode')} failed ({proc.returncode}):\n"
            f"{proc.stderr[-3000:]}\n{proc.stdout[-1000:]}"
        )
    return json.loads(lines[-1])


def run_contention(
    python: str, script: str, base_cfg: Dict[str, Any], marks: str, seed: int
) -> Dict[str, Any]:
    """CONTENTION_PROCS processes over the same CONTENTION_KEYS keys, each in its own shuffled
    order, released together; total = last finish - common start."""
    keys = [f"c{i}" for i in range(CONTENTION_KEYS)]
    procs = []
    for p in range(CONTENTION_PROCS):
        order = list(keys)
        random.Random(seed * 1000 + p).shuffle(order)
        cfg = dict(base_cfg, keys=order, marks=marks)
        pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
        procs.append(subprocess.Popen([python, script, json.dumps(cfg)], text=True, **pipes))
    try:
        for pr in procs:
            line = pr.stdout.readline()
            if line.strip() != "ready":
                raise WorkerError(
                    f"contention worker did not start: {line!r} {pr.stderr.read()[-2000:]}"
                )
        start = time.time() + 0.3
        for pr in procs:
            pr.stdin.write(f"{start}\n")
            pr.stdin.flush()
        outs = []
        for pr in procs:
            out, err = pr.communicate(timeout=WORKER_TIMEOUT)
            lines = [ln for ln in out.splitlines() if ln.strip()]
            if pr.returncode != 0 or not lines:
                raise WorkerError(f"contention worker failed ({pr.returncode}): {err[-2000:]}")
            outs.append(json.loads(lines[-1]))
    finally:
        for pr in procs:
            if pr.poll() is None:
                pr.kill()
    runs: Dict[str, int] = {k: 0 for k in keys}
    for name in os.listdir(marks):
        runs[name.split(".", 1)[0]] = runs.get(name.split(".", 1)[0], 0) + 1
    doubles = sorted(k for k, c in runs.items() if c > 1)
    missing = sorted(k for k, c in runs.items() if c == 0)
    return {
        "total_s": max(o["end"] for o in outs) - start,
        "won": sum(o["won"] for o in outs),
        "lost": sum(o["lost"] for o in outs),
        "errors": sum(o["n_errors"] for o in outs),
        "error_samples": [e for o in outs for e in o["errors"]][:5],
        "executions": sum(runs.values()),
        "double_executions": len(doubles),
        "double_keys": doubles[:10],
        "never_executed": len(missing),
        "exactly_once": not doubles and not missing,
    }


def ensure_venv(venv: str, packages: List[str], check: str) -> str:
    """Create ``venv`` (from the base interpreter) with ``packages`` unless ``check`` already
    runs in it. Returns its python."""
    py = os.path.join(venv, "bin", "python")
    if os.path.exists(py):
        ok = subprocess.run([py, "-c", check], capture_output=True).returncode == 0
        if ok:
            return py
    log(f"setting up {os.path.relpath(venv, ROOT)}: pip install {' '.join(packages)}")
    if not os.path.exists(py):
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", venv], check=True)
    subprocess.run(
        [py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *packages],
        check=True,
    )
    subprocess.run([py, "-c", check], check=True)
    return py

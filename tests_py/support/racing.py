"""Real OS processes racing on the same keys (tests_py/support/_race_worker.py), started together.

Executions are counted from the file system: each run of an executor body creates its own file
with O_CREAT|O_EXCL in a shared directory, so a second execution cannot hide.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

WORKER = Path(__file__).with_name("_race_worker.py")
TIMEOUT = 180


def run_workers(configs, tmp_path):
    """Start one OS process per config, release them together, collect their reports."""
    env = dict(os.environ)
    env.pop("CTRLRUN_STORE", None)
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=str(tmp_path),
            env=env,
        )
        for cfg in configs
    ]
    try:
        for p, cfg in zip(procs, configs):  # the config (and its URL) on stdin
            p.stdin.write(json.dumps(cfg) + "\n")
            p.stdin.flush()
        deadline = time.time() + 60
        for p in procs:  # every worker has imported ctrlrun and opened the store
            line = p.stdout.readline()
            assert line.strip() == "ready", (line, p.stderr.read() if p.poll() is not None else "")
            assert time.time() < deadline
        start_at = time.time() + 0.3
        for p in procs:
            p.stdin.write(f"{start_at!r}\n")
            p.stdin.flush()
        reports = []
        for p in procs:
            out, err = p.communicate(timeout=TIMEOUT)
            assert p.returncode == 0, (
                f"worker exited {p.returncode}\nstdout: {out[-3000:]}\nstderr: {err[-3000:]}"
            )
            reports.append(json.loads(out.strip().splitlines()[-1]))
        return reports
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def executions(marks: Path) -> Counter:
    """key -> how many times its executor body ran (one file per run)."""
    return Counter(name.rsplit(".", 1)[0] for name in os.listdir(marks))

"""Running the ``ctrlrun`` command in a real subprocess, and what its one-line errors look like."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Dict, List, Optional


def run_cli(*args: str, cmd: Optional[List[str]] = None, env: Optional[Dict[str, str]] = None,
            cwd=None, timeout: float = 120) -> subprocess.CompletedProcess:
    base = cmd if cmd is not None else [sys.executable, "-m", "ctrlrun"]
    return subprocess.run(
        [*base, *args], capture_output=True, text=True, timeout=timeout,
        env=env if env is not None else dict(os.environ), cwd=cwd,
    )


def assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit 2, nothing on stdout, exactly one line on stderr, no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert proc.stdout == ""
    line = lines[0]
    assert line.startswith("ctrlrun: "), line
    for n in needles:
        assert n in line, (n, line)
    return line

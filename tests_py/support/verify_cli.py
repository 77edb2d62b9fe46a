"""Running ``ctrlrun verify`` in a real subprocess, and reading its output."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Dict, List, Optional


def sqlite_url(path) -> str:
    return f"sqlite:///{path}"


def run_cli(
    *args: str, env: Optional[Dict[str, str]] = None, cwd=None, timeout: float = 300
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ctrlrun", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env if env is not None else dict(os.environ),
        cwd=cwd,
    )


def out_lines(proc) -> List[str]:
    """The guarantees' lines (G3, G4) of standard output."""
    return [ln for ln in proc.stdout.splitlines() if ln.strip() and not ln.startswith("posture ")]


def posture_lines(proc) -> List[str]:
    """The posture's lines of standard output (``posture <check>: <STANDING> - <detail>``)."""
    return [ln for ln in proc.stdout.splitlines() if ln.startswith("posture ")]


def progress_lines(proc) -> List[str]:
    return [ln for ln in proc.stderr.splitlines() if ln.startswith("verify: ")]

"""The benchmark's venvs: the original product (``bench/.ref-venv``) and the floors' psycopg
(``bench/.floor-venv``), made on first use from the base interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import List

from bench.workers import BENCH, ROOT, log

REF_VENV = os.path.join(BENCH, ".ref-venv")
FLOOR_VENV = os.path.join(BENCH, ".floor-venv")
REF_VERSION = "0.12.2"
PSYCOPG = "psycopg[binary]==3.3.9"


def venv_python(venv: str) -> str:
    return os.path.join(venv, "bin", "python")


def ensure_venv(venv: str, packages: List[str], check: str) -> str:
    """Create ``venv`` (from the base interpreter) with ``packages`` unless ``check`` already
    runs in it. Returns its python."""
    py = venv_python(venv)
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

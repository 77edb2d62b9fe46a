"""The programs in examples/ run to a clean exit and pass ``mypy --strict``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
PROGRAMS = ["refund_agent.py", "async_agent.py"]


def _env() -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("CTRLRUN_STORE", "CTRLRUN_STATE", "CTRLRUN_CONFIG")
    }
    return env


@pytest.mark.parametrize("program", PROGRAMS)
def test_example_runs(program: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / program)],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"{program} exited {done.returncode}\n{done.stdout}{done.stderr}"
    assert done.stdout.strip(), f"{program} printed nothing"
    assert list(tmp_path.iterdir()) == [], "the example wrote into its working directory"


def test_examples_pass_mypy_strict(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--cache-dir",
            str(tmp_path / "cache"),
            "examples",
        ],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"mypy --strict examples:\n{done.stdout}{done.stderr}"

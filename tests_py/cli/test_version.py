"""One version, ours (issue 47, item 1): above the original product's 0.12.2 on PyPI, the same in
pyproject.toml, Cargo.toml, ``ctrlrun.__version__``, ``ctrlrun --version`` and CHANGELOG.md."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import ctrlrun
from tests_py.support.cli import run_cli

ROOT = Path(__file__).resolve().parents[2]


def declared(path: str, pattern: str) -> str:
    found = re.search(pattern, (ROOT / path).read_text(encoding="utf-8"), re.M)
    assert found, f"{path} declares no version"
    return found.group(1)


def test_one_version_above_the_original_product_everywhere_it_is_said():
    version = ctrlrun.__version__
    assert tuple(int(p) for p in version.split(".")) > (0, 12, 2)
    assert declared("pyproject.toml", r'^version = "([^"]+)"') == version
    assert declared("Cargo.toml", r'^version = "([^"]+)"') == version
    assert declared("CHANGELOG.md", r"^## \[(\d[^\]]*)\]") == version
    proc = run_cli("--version", process=True)  # python -m ctrlrun, a real process
    assert proc.returncode == 0 and proc.stdout.strip().endswith(f"version {version}"), proc.stdout
    assert sys.modules["ctrlrun"].__version__ == version

"""Policy files the tests write."""

from __future__ import annotations

import textwrap
from pathlib import Path


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


#: ``acme.wire`` needs two distinct approvers (the approvals tests' policy).
TWO_APPROVERS = """\
schema: ctrlrun.policy/v2
actions:
  acme.wire:
    effect: 'wire:{ref}'
    decision: approve
    approvals: 2
"""


def use(tmp_path: Path, monkeypatch, text: str) -> Path:
    """``text`` as the policy file in force (``CTRLRUN_CONFIG``) for the test."""
    path = write(tmp_path / "ctrlrun.yaml", text)
    monkeypatch.setenv("CTRLRUN_CONFIG", str(path))
    return path

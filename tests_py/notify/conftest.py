"""Fixtures of the notification tests: a real receiver, a per-test working directory (so
./ctrlrun.yaml is the test's), the secret a json target signs with."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Iterator

import pytest

from ctrlrun.notify import delivery
from tests_py.notify.receiver import Receiver

SECRET = "s3cret-for-the-notify-tests-0123456789"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    delivery.flush(10)  # nothing of this test is still being sent to the next test's receiver
    r.close()


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("CTRLRUN_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NOTIFY_TEST_SECRET", SECRET)
    return tmp_path


def policy(directory: Path, text: str) -> Path:
    """Write ``text`` (dedented) as ``ctrlrun.yaml`` in ``directory``."""
    path = directory / "ctrlrun.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path

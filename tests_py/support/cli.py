"""Running the ``ctrlrun`` command (in this process, or in a real subprocess), what its output and one-line errors look
like, and the store rows the CLI tests make."""

from __future__ import annotations

import logging
import os
import re
import socket
import subprocess
import sys
import traceback
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Dict, List, Optional

import pytest

import ctrlrun
from ctrlrun import EffectState


def run_cli(
    *args: str,
    cmd: Optional[List[str]] = None,
    env: Optional[Dict[str, str]] = None,
    cwd=None,
    timeout: float = 120,
    process: bool = False,
) -> subprocess.CompletedProcess:
    """``ctrlrun *args``: in this process (click's CliRunner isolation, about 100 times faster
    than starting Python), or in a real subprocess with ``process=True`` or ``cmd`` (where the
    process itself is the point: the entry point, signals, what other processes can see)."""
    if cmd is not None or process:
        base = cmd if cmd is not None else [sys.executable, "-m", "ctrlrun"]
        return subprocess.run(
            [*base, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env if env is not None else dict(os.environ),
            cwd=cwd,
        )
    return run_in_process(list(args), env=env, cwd=cwd)


def run_in_process(
    args: List[str], env: Optional[Dict[str, str]] = None, cwd=None
) -> subprocess.CompletedProcess:
    """``ctrlrun.cli.main(args)`` as a subprocess would see it: the environment replaced by
    ``env`` (when given) and the working directory by ``cwd``; its exit status; stdout and
    stderr apart; what an uncaught exception prints (a traceback on stderr, status 1); and
    WARNING records of the ``ctrlrun`` loggers on stderr, as Python's last-resort handler
    prints them when no logging is configured (pytest's own handler would swallow them)."""
    from click.testing import CliRunner

    from ctrlrun.cli.main import main

    changes: Dict[str, Optional[str]] = {}
    if env is not None:
        changes = {k: None for k in os.environ if k not in env}
        changes.update({k: v for k, v in env.items() if os.environ.get(k) != v})
    before = os.getcwd()
    handler = logging.StreamHandler()
    handler.setLevel(logging.WARNING)
    root = logging.getLogger()
    code = 0
    with CliRunner().isolation(env=changes) as (out, err, _):
        handler.setStream(sys.stderr)
        root.addHandler(handler)
        try:
            if cwd is not None:
                os.chdir(cwd)
            main(args)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if exc.code is not None and not isinstance(exc.code, int):
                print(exc.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc(file=sys.stderr)
            code = 1
        finally:
            os.chdir(before)
            root.removeHandler(handler)
            sys.stdout.flush()
            sys.stderr.flush()
        stdout, stderr = out.getvalue().decode(), err.getvalue().decode()
    return subprocess.CompletedProcess(["ctrlrun", *args], code, stdout, stderr)


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


def sqlite_url(path) -> str:
    return f"sqlite:///{path}"


CONSOLE_SCRIPT = Path(sys.executable).parent / "ctrlrun"


ISO_Z = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$")


def new_id() -> str:
    return "act_" + uuid.uuid4().hex


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def table_rows(stdout: str) -> List[List[str]]:
    lines = stdout.splitlines()
    assert lines[0].split()[:2] == ["EFFECT", "KEY"], stdout
    return [ln.split() for ln in lines[1:] if ln.strip()]


def parse_show(stdout: str) -> Dict[str, str]:
    out = {}
    for ln in stdout.splitlines():
        k, sep, v = ln.strip().partition(":")
        assert sep, ln
        out[k] = v[1:] if v.startswith(" ") else v
    return out


def parse_iso(text: str) -> datetime:
    assert ISO_Z.match(text), text
    dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    assert dt.utcoffset() == timedelta(0)
    return dt


def make_committed(store, key: str, value="ok"):
    @ctrlrun.protect("cli.commit", effect="{k}", store=store)
    def do(k):
        return {"value": value}

    do(key)
    return store.get_effect(key)


def make_ambiguous(store, key: str):
    @ctrlrun.protect("cli.ambiguous", effect="{k}", store=store)
    def boom(k):
        raise ValueError("provider reset the connection")

    with pytest.raises(ValueError):
        boom(key)
    rec = store.get_effect(key)
    assert rec.state == EffectState.AMBIGUOUS
    return rec


def make_live(store, key: str, seconds: int = 3600):
    return store.reserve_effect(key, new_id(), seconds)


def make_lapsed(store_url: str, key: str, hours_ago: float = 2):
    past = datetime.now(timezone.utc) - timedelta(hours=hours_ago)
    with ctrlrun.open_store(store_url, clock=lambda: past) as clocked:
        clocked.reserve_effect(key, new_id(), 60)


STORE_COMMANDS = [
    ["effects", "list"],
    ["effects", "list", "--json"],
    ["effects", "show", "some:key"],
    ["resolve", "some:key", "--committed"],
]

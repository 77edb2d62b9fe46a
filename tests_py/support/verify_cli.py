"""Running ``ctrlrun verify``, and reading its output."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

from tests_py.support import cli


def sqlite_url(path) -> str:
    return f"sqlite:///{path}"


def run_cli(
    *args: str,
    env: Optional[Dict[str, str]] = None,
    cwd=None,
    timeout: float = 300,
    process: bool = False,
) -> subprocess.CompletedProcess:
    """``ctrlrun *args`` in this process (tests_py/support/cli.py), or with ``process`` in a
    real one; verify's workers are real processes all the same."""
    return cli.run_cli(*args, env=env, cwd=cwd, timeout=timeout, process=process)


def out_lines(proc) -> List[str]:
    """The guarantees' lines (G3, G4) of standard output."""
    return [ln for ln in proc.stdout.splitlines() if ln.strip() and not ln.startswith("posture ")]


def posture_lines(proc) -> List[str]:
    """The posture's lines of standard output (``posture <check>: <STANDING> - <detail>``)."""
    return [ln for ln in proc.stdout.splitlines() if ln.startswith("posture ")]


def progress_lines(proc) -> List[str]:
    return [ln for ln in proc.stderr.splitlines() if ln.startswith("verify: ")]


def run_watching_command_lines(
    args: List[str], env: Dict[str, str], secret: str, worker: str, timeout: float = 120
) -> Tuple[str, str, int, List[str], Set[str]]:
    """Run ``python -m ctrlrun *args`` and, while it runs, read the /proc/<pid>/cmdline
    (readable by every local user) of it and of each process it started. Returns its stdout, stderr and exit
    status, the command lines that showed ``secret`` (there must be none) and the pids whose
    command line names the module ``worker`` (so the scan is known to have seen them)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctrlrun", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: List[str] = []
    workers: Set[str] = set()
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/stat", "rb") as f:
                    parent = int(f.read().rsplit(b")", 1)[1].split()[1])
                if proc.pid not in (int(pid), parent):
                    continue  # another program's process (other test runs share the password)
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            except (OSError, ValueError, IndexError):
                continue
            if worker in cmdline:
                workers.add(pid)
            if secret in cmdline:
                seen.append(cmdline)
        time.sleep(0.01)
    out, err = proc.communicate(timeout=timeout)
    return out, err, proc.returncode, seen, workers


# A library broken on purpose, in the worker processes of one command only (their command line
# names the module CTRLRUN_TEST_BREAK_IN): "crash" exits at once, "twice" runs each protected
# body twice in one call, "unreserved" runs it without reserving.
BREAK_HOOK = textwrap.dedent("""\
    import os
    with open("/proc/self/cmdline", "rb") as _f:
        _cmd = _f.read()
    if os.environ.get("CTRLRUN_TEST_BREAK_IN", "-").encode() in _cmd:
        _mode = os.environ.get("CTRLRUN_TEST_BREAK")
        if _mode == "crash":
            os._exit(3)
        import ctrlrun.call.runner as _p
        _orig = _p.run
        if _mode == "twice":
            def _run(call, fn, args, kwargs, hb=False):
                def both(*a, **k):
                    fn(*a, **k)
                    return fn(*a, **k)
                return _orig(call, both, args, kwargs, hb)
            _p.run = _run
        elif _mode == "unreserved":
            _p.run = lambda call, fn, args, kwargs, hb=False: fn(*args, **kwargs)
    """)


def broken_env(tmp_path: Path, worker: str, mode: str) -> Dict[str, str]:
    """The environment of a command whose ``worker`` processes run a library broken by
    ``mode`` (see BREAK_HOOK); the command itself, and ctrlrun's import path, are unchanged."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(BREAK_HOOK)
    path = os.pathsep.join(p for p in (str(hook), os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, PYTHONPATH=path, CTRLRUN_TEST_BREAK_IN=worker, CTRLRUN_TEST_BREAK=mode)

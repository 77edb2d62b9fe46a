"""Install hints that work (issue 47, items 3, 6 and 7): a command that needs POSIX says so in one
line on Windows; a command whose optional extra is missing
prints one line naming the extra (never a traceback), on a Python too old for the extra says so,
and a protected function that ends up unreserved says so once."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest

import ctrlrun
from ctrlrun.cli._common import require_extra, require_posix

HIDDEN = """
import sys
for name in {hidden!r}:
    sys.modules[name] = None  # as if the extra were not installed
from ctrlrun.cli import main
sys.argv = ["ctrlrun", *{args!r}]
main()
"""


def run_without(hidden, *args: str, cwd) -> subprocess.CompletedProcess:
    code = HIDDEN.format(hidden=list(hidden), args=list(args))
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=cwd
    )


@pytest.mark.parametrize(
    "hidden, args, extra",
    [
        (("starlette",), ("console", "--store", "sqlite:///s.db"), "console"),
        (("mcp",), ("gateway", "--name", "git", "--", "true"), "gateway"),
    ],
)
def test_a_missing_extra_is_one_line_naming_it(tmp_path, hidden, args, extra):
    proc = run_without(hidden, *args, cwd=tmp_path)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert f"needs the '{extra}' extra ({hidden[0]} not installed)" in line
    assert f"pip install 'ctrlrun[{extra}]'" in line and f"pip install '.[{extra}]'" in line


def test_a_python_too_old_for_the_extra_is_told_so(capsys):
    with pytest.raises(SystemExit) as done:
        require_extra("gateway", ("mcp",), "ctrlrun gateway", python=(3, 9))
    assert done.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "ctrlrun: ctrlrun gateway needs Python 3.10 or newer (this is 3.9): the 'gateway' "
        "extra installs nothing on it"
    )


@pytest.mark.parametrize("what", ["ctrlrun gateway", "ctrlrun soak"])
def test_a_posix_only_command_on_windows_is_one_line(capsys, what):
    with pytest.raises(SystemExit) as done:
        require_posix(what, system="nt")
    assert done.value.code == 2
    assert capsys.readouterr().err.strip() == (
        f"ctrlrun: {what} is not available on Windows yet (it needs POSIX descriptors and "
        "signals); run it under WSL"
    )
    require_posix(what, system="posix")  # and nothing elsewhere


def test_a_function_left_unreserved_by_a_missing_policy_warns_once(tmp_path, monkeypatch):
    monkeypatch.delenv("CTRLRUN_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)

    @ctrlrun.protect("crm.add_note", store=f"sqlite:///{tmp_path / 's.db'}")
    def add_note(text: str) -> str:
        return text

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert add_note("a") == "a" and add_note("a") == "a"  # unreserved: it runs twice
    (warned,) = [w for w in seen if issubclass(w.category, ctrlrun.PolicyWarning)]
    text = str(warned.message)
    assert "protect('crm.add_note')" in text and "add_note" in text
    assert str(tmp_path / "ctrlrun.yaml") in text and "run unreserved" in text
    # an entry that names the action without a template is a choice: no warning
    (tmp_path / "ctrlrun.yaml").write_text(
        "schema: ctrlrun.policy/v2\nactions:\n  crm.other:\n    decision: allow\n"
    )

    @ctrlrun.protect("crm.other", store=f"sqlite:///{tmp_path / 's.db'}")
    def other() -> int:
        return 1

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert other() == 1
    assert [w for w in seen if issubclass(w.category, ctrlrun.PolicyWarning)] == []

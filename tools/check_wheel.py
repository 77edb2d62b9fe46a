#!/usr/bin/env python3
"""The built wheel works where a user installs it: ``make dist-check`` runs this after ``make dist``.

    python3 tools/check_wheel.py --auditwheel .venv/bin/auditwheel dist

1. ``auditwheel show`` must find the wheel consistent with manylinux2014 (glibc 2.17): a symbol
   from a newer glibc fails the check, naming the tag it needs.
2. For the oldest and the newest CPython the package supports (3.9 and 3.13 from pyenv, or each
   ``--python``), a fresh venv gets the wheel and its dependencies, as wheels only, with no Rust
   toolchain on PATH (every PATH entry holding ``cargo`` or ``rustc`` is left out, and the check
   fails if one is still found). There the version must be this one, the README's quickstart
   must print what it says, and ``ctrlrun demo`` must end with its "never twice" line, each in a
   folder of its own outside this checkout.

Prints one line per step; exits 1 on the first failure, with the output that shows why.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parents[1]
OLDEST_GLIBC = (2, 17)  # manylinux2014
PYTHONS = ("3.9", "3.13")  # requires-python's floor, and the newest CPython here


class CheckFailed(Exception):
    pass


def run(cmd: List[str], env: Dict[str, str], cwd: Path, what: str) -> str:
    proc = subprocess.run(
        cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=600, check=False
    )
    if proc.returncode != 0:
        raise CheckFailed(f"{what} failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def the_wheel(dist: Path) -> Path:
    """The one abi3 manylinux2014 wheel in `dist`."""
    wheels = sorted(dist.glob("ctrlrun-*-cp39-abi3-*.whl"))
    if len(wheels) != 1:
        raise CheckFailed(f"expected one abi3 wheel in {dist}, found {[w.name for w in wheels]}")
    if "manylinux2014_" not in wheels[0].name:
        raise CheckFailed(f"{wheels[0].name} is not tagged manylinux2014")
    return wheels[0]


def check_glibc(auditwheel: str, wheel: Path) -> None:
    out = run([auditwheel, "show", str(wheel)], dict(os.environ), ROOT, "auditwheel show")
    # The wheel as a whole (versioned symbols, and libraries outside the manylinux list).
    flat = " ".join(out.split())  # auditwheel wraps its lines
    found = re.search(
        r'is consistent with the following platform tag: "manylinux_(\d+)_(\d+)_\w+"', flat
    )
    if found is None:
        raise CheckFailed(
            f"auditwheel show finds the wheel consistent with no manylinux tag:\n{out}"
        )
    needs = (int(found.group(1)), int(found.group(2)))
    if needs > OLDEST_GLIBC:
        raise CheckFailed(
            f"{wheel.name} needs glibc {needs[0]}.{needs[1]}, newer than manylinux2014's "
            f"{OLDEST_GLIBC[0]}.{OLDEST_GLIBC[1]}:\n{out}"
        )
    print(f"check-wheel: {wheel.name}: needs glibc {needs[0]}.{needs[1]} at most (auditwheel)")


def pyenv_python(version: str) -> str:
    root = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    # Numerically (3.9.10 after 3.9.9); no free-threaded build (3.13t loads no abi3 wheel).
    found = sorted(
        (
            p
            for p in glob.glob(f"{root}/versions/{version}.*/bin/python{version}")
            if re.fullmatch(r"\d+\.\d+\.\d+", Path(p).parents[1].name)
        ),
        key=lambda p: [int(n) for n in Path(p).parents[1].name.split(".")],
    )
    if not found:
        raise CheckFailed(
            f"no CPython {version} under {root}/versions: install it (pyenv install {version}) "
            "or name one with --python"
        )
    return found[-1]


def without_rust() -> Dict[str, str]:
    """This environment with no Rust toolchain reachable: so a wheel that is really an sdist,
    or a dependency that would compile, fails here instead of building quietly."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CARGO", "RUSTUP", "RUST"))}
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    kept = [
        d
        for d in os.environ.get("PATH", "").split(os.pathsep)
        if d and not any(os.path.exists(os.path.join(d, tool)) for tool in ("cargo", "rustc"))
    ]
    env["PATH"] = os.pathsep.join(kept)
    for tool in ("cargo", "rustc"):
        if shutil.which(tool, path=env["PATH"]):
            raise CheckFailed(f"{tool} is still on PATH after leaving out its folders")
    return env


def quickstart() -> str:
    """The README's first Python block under '## Quickstart'."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Quickstart\n", 1)[1]
    return section.split("```python\n", 1)[1].split("\n```", 1)[0]


def version() -> str:
    found = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert found is not None
    return found.group(1)


def check_python(python: str, wheel: Path, work: Path) -> None:
    """A fresh venv of `python` with the wheel, no Rust on PATH; then `check_installed` there."""
    env = without_rust()
    venv = work / "venv"
    run([python, "-m", "venv", str(venv)], env, work, f"{python} -m venv")
    bin_dir = venv / "bin"
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    pip = [str(bin_dir / "python"), "-m", "pip", "--disable-pip-version-check", "--no-input"]
    run(
        [*pip, "install", "--quiet", "--only-binary", ":all:", str(wheel)], env, work, "pip install"
    )
    check_installed(str(bin_dir / "python"), env, work, inside=venv)


def check_installed(python: str, env: Dict[str, str], work: Path, inside: Path) -> None:
    """In `work`, with the ctrlrun that `python` imports: its version (from under `inside`),
    the quickstart, `ctrlrun demo`. CTRLRUN_CHECK_STORE names a store URL to use instead of
    the quickstart's SQLite file (on a platform with no SQLite store, whose refusal is then
    checked)."""
    got = run(
        [python, "-c", "import ctrlrun; print(ctrlrun.__version__, ctrlrun.__file__)"],
        env,
        work,
        "import ctrlrun",
    ).split()
    if got[0] != version() or not Path(got[1]).resolve().is_relative_to(inside.resolve()):
        raise CheckFailed(f"imported ctrlrun {got[0]} from {got[1]}, not {version()} from {inside}")
    where = run([python, "-V"], env, work, "python -V").strip()
    print(f"check-wheel: {where}: imports ctrlrun {got[0]} from {inside}")

    store = env.get("CTRLRUN_CHECK_STORE")
    code = quickstart()
    if store:
        code = code.replace('"sqlite:///.ctrlrun/state.db"', repr(store))
    if store and os.name == "nt":
        refused = run([python, "-c", SQLITE_REFUSED], env, work, "the SQLite refusal").strip()
        print(f"check-wheel: {where}: a SQLite store is refused: {refused}")
    (work / "quickstart").mkdir()
    (work / "quickstart.py").write_text(code, encoding="utf-8")
    out = run([python, "../quickstart.py"], env, work / "quickstart", "quickstart")
    if out.strip() != "committed email:msg_8812":
        raise CheckFailed(f"the quickstart printed {out!r}, not 'committed email:msg_8812'")
    print(f"check-wheel: {where}: the README's quickstart prints: {out.strip()}")

    (work / "demo").mkdir()
    demo = [python, "-m", "ctrlrun", "demo", *(["--store", store] if store else [])]
    out = run(demo, env, work / "demo", "ctrlrun demo")
    last = [line for line in out.splitlines() if "never twice" in line]
    if not last:
        raise CheckFailed(f"ctrlrun demo did not end with its 'never twice' line:\n{out}")
    print(f"check-wheel: {where}: ctrlrun demo: {last[0].strip()}")


# Where the SQLite store has no file identity (Windows), opening one is refused, naming why.
SQLITE_REFUSED = """
import ctrlrun
try:
    ctrlrun.open_store("sqlite:///refused.db")
except ctrlrun.CTRLRunError as exc:
    assert "not available on this platform" in str(exc), exc
    print(type(exc).__name__)
else:
    raise SystemExit("a SQLite store opened on a platform with no file identity")
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dist", type=Path, nargs="?", help="the folder make dist wrote (dist/)")
    parser.add_argument("--auditwheel", help="the auditwheel command")
    parser.add_argument(
        "--audit-only",
        action="store_true",
        help="only auditwheel's verdict (the release workflow's Linux builds)",
    )
    parser.add_argument(
        "--installed",
        action="store_true",
        help="check the ctrlrun this Python has installed (the release workflow's test jobs)",
    )
    parser.add_argument("--python", action="append", help="a CPython to install into (repeat)")
    args = parser.parse_args()
    try:
        if args.installed:
            with tempfile.TemporaryDirectory(prefix="ctrlrun-wheel-") as work:
                check_installed(sys.executable, dict(os.environ), Path(work), Path(sys.prefix))
            print("check-wheel: ok")
            return 0
        if args.dist is None or args.auditwheel is None:
            parser.error("give the dist folder and --auditwheel (or --installed)")
        wheel = the_wheel(args.dist.resolve())
        check_glibc(args.auditwheel, wheel)
        if args.audit_only:
            return 0
        for python in args.python or [pyenv_python(v) for v in PYTHONS]:
            with tempfile.TemporaryDirectory(prefix="ctrlrun-wheel-") as work:
                check_python(python, wheel, Path(work))
    except CheckFailed as exc:
        print(f"check-wheel: FAIL: {exc}", file=sys.stderr)
        return 1
    print("check-wheel: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())

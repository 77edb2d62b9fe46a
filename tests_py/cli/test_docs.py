"""Every code block of README.md and docs/*.md runs, so an example that rots fails a test.

Conventions for code blocks in those files (one pytest case per block, id ``file:line``):

* ```python blocks run in order per file, in one namespace shared by that file's blocks (a
  later block sees the names an earlier one defined), inside a fresh temporary working
  directory of that file's own. ``CTRLRUN_STATE`` points to ``.ctrlrun/state.db`` in that
  directory (the default location, pinned into the temp dir); ``CTRLRUN_STORE`` and
  ``CTRLRUN_CONFIG`` are unset. The default store set with ``set_default_store`` carries from
  block to block within one file and never leaks to another file. A python block whose first
  line is ``# file: NAME`` is also saved as NAME in the directory once it has run, so a later
  console block can run it (``python NAME``, ``pytest NAME``).
* ```console blocks hold commands on lines starting with ``$ `` (a line ending in ``\\``
  continues on the next line); the other lines are output, shown for illustration and not
  compared, except in docs/cli.md, where they must be what the command prints (action ids,
  times, leases left and temporary paths aside; a line ``...`` elides lines). Each command runs with bash (``pipefail`` on) in the same directory and
  environment as the python blocks, with the test's Python environment first on ``PATH``
  (``ctrlrun`` and ``python`` are this checkout's). Directory and environment changes carry
  from one command to the next within a block. A command must exit 0 unless it ends with the
  comment ``# exit N``, in which case it must exit N.
* ```yaml blocks are policy files: each is written to ``ctrlrun.yaml`` in the directory and
  must pass ``ctrlrun policy check``. The file stays, so later python blocks of the same file
  run under that policy.
* ```text blocks are output shown to the reader and are not run.
* Any other fence language, or a fence with none, fails: nothing escapes the tests.

Running one case alone (``-k``) first runs the blocks before it in the same file.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

import ctrlrun

ROOT = Path(__file__).resolve().parents[2]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]
LANGUAGES = ("python", "console", "yaml", "text")
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
EXIT = re.compile(r"#\s*exit\s+(\d+)\s*$")
COMMAND_TIMEOUT = 300


@dataclass(frozen=True)
class Block:
    file: str  # relative to the repository root
    line: int  # 1-based line of the opening fence
    lang: str
    body: str
    index: int  # position among the file's blocks

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}"


def parse_blocks(path: Path) -> List[Block]:
    """The fenced code blocks of a Markdown file, in order."""
    rel = path.relative_to(ROOT).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: List[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m.group("indent"), m.group("fence"), m.group("info").strip()
        start = i + 1
        body: List[str] = []
        i += 1
        while i < len(lines):
            close = FENCE.match(lines[i])
            if (
                close
                and close.group("fence")[0] == fence[0]
                and len(close.group("fence")) >= len(fence)
                and not close.group("info").strip()
            ):
                break
            text = lines[i]
            body.append(text[len(indent) :] if text.startswith(indent) else text.lstrip())
            i += 1
        else:
            raise AssertionError(f"{rel}:{start}: the code fence is never closed")
        lang = info.split()[0] if info else ""
        blocks.append(Block(rel, start, lang, "\n".join(body) + "\n", len(blocks)))
        i += 1
    return blocks


BLOCKS: Dict[str, List[Block]] = {
    p.relative_to(ROOT).as_posix(): parse_blocks(p) for p in DOC_FILES
}

# The pages of frameworks that cannot share the main venv (their pins conflict with it), and the
# module each needs: their blocks run in the framework's own venv (`make test-frameworks`), and
# are not collected where that module is not importable (no skip: that venv runs them).
OWN_VENV = {"docs/integrations/strands.md": "strands", "docs/integrations/crewai.md": "crewai"}
ALL_BLOCKS = [
    b
    for rel, blocks in BLOCKS.items()
    if rel not in OWN_VENV or importlib.util.find_spec(OWN_VENV[rel]) is not None
    for b in blocks
]


@dataclass
class FileState:
    """What one Markdown file's blocks share."""

    directory: Path
    namespace: Dict[str, object] = field(default_factory=dict)
    done: int = 0  # blocks run so far
    failed: List[str] = field(default_factory=list)
    default_store: Optional[ctrlrun.Store] = None


_STATES: Dict[str, FileState] = {}


@pytest.fixture(scope="session")
def doc_states(tmp_path_factory: pytest.TempPathFactory):
    def get(rel: str) -> FileState:
        state = _STATES.get(rel)
        if state is None:
            name = re.sub(r"[^A-Za-z0-9]+", "-", rel)
            state = FileState(tmp_path_factory.mktemp(f"doc-{name}", numbered=True))
            _STATES[rel] = state
        return state

    return get


def _environment(state: FileState, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(state.directory)
    monkeypatch.setenv("CTRLRUN_STATE", str(state.directory / ".ctrlrun" / "state.db"))
    monkeypatch.delenv("CTRLRUN_STORE", raising=False)
    monkeypatch.delenv("CTRLRUN_CONFIG", raising=False)
    bindir = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", bindir + os.pathsep + os.environ.get("PATH", ""))


def _run_python(block: Block, state: FileState) -> None:
    code = compile("\n" * block.line + block.body, str(ROOT / block.file), "exec")
    exec(code, state.namespace)
    first = block.body.splitlines()[0] if block.body.strip() else ""
    m = re.match(r"#\s*file:\s*(\S+)\s*$", first)
    if m:
        (state.directory / m.group(1)).write_text(block.body, encoding="utf-8")


def _commands(block: Block) -> List[Tuple[str, List[str]]]:
    """Each command of a console block, with the output lines shown after it."""
    commands: List[Tuple[str, List[str]]] = []
    pending: Optional[str] = None
    for raw in block.body.splitlines():
        if pending is not None:
            pending += "\n" + raw
        elif raw.startswith("$ "):
            pending = raw[2:]
        else:
            if commands:
                commands[-1][1].append(raw)  # output
            continue
        if pending.endswith("\\"):
            continue
        commands.append((pending, []))
        pending = None
    assert pending is None, f"{block.id}: the last command ends with a line continuation"
    assert commands, f"{block.id}: a console block needs at least one '$ ' command"
    return commands


# Files whose console output is compared with what the commands print (after _normalize).
COMPARED = {"docs/cli.md"}
VOLATILE = [
    (re.compile(r"act_[0-9a-f]{32}"), "act_<id>"),
    (re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z?"), "<time>"),
    (re.compile(r"(\d+h)?(\d+m)?\d+s left"), "<left>"),
    (re.compile(r"/tmp/ctrlrun-demo-\w+"), "/tmp/<demo>"),
    (re.compile(r"\(attempt 1, act_…\)"), "(attempt 1, act_<id>)"),
    # the holder (host:pid) ends a table line and a `show` line, and is a JSON field
    (re.compile(r"\b[A-Za-z0-9][A-Za-z0-9.-]*:\d+$"), "<host>:<pid>"),
    (re.compile(r'"holder": "[^"]*"'), '"holder": "<host>:<pid>"'),
    (re.compile(r"\bsha256:[0-9a-f]{64}"), "sha256:<digest>"),
    (re.compile(r"\bapr_[0-9a-f]{32}"), "apr_<id>"),
]


def _normalize(lines: List[str], directory: Path) -> List[str]:
    out = []
    for line in lines:
        line = line.replace(str(directory), "/home/agent")
        for pattern, stand_in in VOLATILE:
            line = pattern.sub(stand_in, line)
        out.append(line.rstrip())
    while out and not out[-1]:
        out.pop()
    return out


def _compare_output(
    block: Block, command: str, shown: List[str], printed: str, directory: Path
) -> None:
    """The output shown under a command is what it prints; a line ``...`` elides lines."""
    want, got = _normalize(shown, directory), _normalize(printed.splitlines(), directory)
    if "..." in want:
        cut = want.index("...")
        head, tail = want[:cut], want[cut + 1 :]
        ok = got[: len(head)] == head and (not tail or got[-len(tail) :] == tail)
    else:
        ok = got == want
    if not ok:
        pytest.fail(
            f"{block.id}: `{command}` printed other output than the page shows\n"
            f"--- shown\n" + "\n".join(want) + "\n--- printed\n" + "\n".join(got),
            pytrace=False,
        )


def _run_console(block: Block, state: FileState) -> None:
    envfile = state.directory / f".console-env-{block.line}"
    cwdfile = state.directory / f".console-cwd-{block.line}"
    cwdfile.write_text(str(state.directory))
    for command, shown in _commands(block):
        m = EXIT.search(command.splitlines()[-1])
        expected = int(m.group(1)) if m else 0
        script = (
            f'set -o pipefail\n[ -f "{envfile}" ] && source "{envfile}"\ncd "$(cat "{cwdfile}")"\n'
            f"{command}\n__doc_rc=$?\n"
            f'export -p > "{envfile}"\npwd > "{cwdfile}"\nexit $__doc_rc\n'
        )
        done = subprocess.run(
            ["bash", "-c", script],
            cwd=state.directory,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
        )
        if done.returncode != expected:
            pytest.fail(
                f"{block.id}: `{command}` exited {done.returncode}, expected {expected}\n"
                f"--- stdout\n{done.stdout}--- stderr\n{done.stderr}",
                pytrace=False,
            )
        if block.file in COMPARED:
            # a success shows its standard output (progress goes to stderr); a failure its
            # message, on stderr
            printed = done.stdout if done.returncode == 0 else done.stdout + done.stderr
            _compare_output(block, command, shown, printed, state.directory)


def _run_yaml(block: Block, state: FileState) -> None:
    (state.directory / "ctrlrun.yaml").write_text(block.body, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "ctrlrun", "policy", "check"],
        cwd=state.directory,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
    )
    if done.returncode != 0:
        pytest.fail(
            f"{block.id}: `ctrlrun policy check` exited {done.returncode}\n"
            f"{done.stdout}{done.stderr}",
            pytrace=False,
        )


def _run(block: Block, state: FileState) -> None:
    if block.lang == "python":
        _run_python(block, state)
    elif block.lang == "console":
        _run_console(block, state)
    elif block.lang == "yaml":
        _run_yaml(block, state)
    elif block.lang == "text":
        pass
    else:
        pytest.fail(
            f"{block.id}: code block language {block.lang or '(none)'!r} is not one of "
            f"{', '.join(LANGUAGES)}; every block must be checked by the tests",
            pytrace=False,
        )


def _run_in_place(block: Block, state: FileState) -> None:
    """Run one block with the file's default store in force, then put the process back."""
    ctrlrun.set_default_store(state.default_store)
    try:
        _run(block, state)
    finally:
        state.default_store = ctrlrun.set_default_store(None)


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=[b.id for b in ALL_BLOCKS])
def test_doc_block(block: Block, doc_states, monkeypatch: pytest.MonkeyPatch) -> None:
    state: FileState = doc_states(block.file)
    _environment(state, monkeypatch)
    for earlier in BLOCKS[block.file][state.done : block.index]:
        try:
            _run_in_place(earlier, state)
        except BaseException as exc:
            state.failed.append(earlier.id)
            pytest.fail(
                f"{block.id}: an earlier block of the file failed: {earlier.id}: {exc!r}",
                pytrace=False,
            )
        finally:
            state.done = earlier.index + 1
    if state.done > block.index:
        return  # already run as an earlier block of another case
    try:
        _run_in_place(block, state)
    except BaseException:
        state.failed.append(block.id)
        if len(state.failed) > 1:
            sys.stderr.write(f"note: earlier blocks failed first: {state.failed[:-1]}\n")
        raise
    finally:
        state.done = block.index + 1


# -- the documents themselves ---------------------------------------------------------------


def test_every_doc_file_has_runnable_blocks() -> None:
    assert (ROOT / "docs").is_dir(), "docs/ is missing"
    for rel, blocks in BLOCKS.items():
        if rel != "docs/index.md":
            assert any(b.lang != "text" for b in blocks), f"{rel} has no checked code block"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"`|\*\*|__|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading)
    text = text.strip().lower()
    out = []
    for ch in text:
        cat = unicodedata.category(ch)
        if ch in "-_" or cat[0] in "LN" or cat == "Mn":
            out.append(ch)
        elif ch == " ":
            out.append("-")
    return "".join(out)


def _anchors(path: Path) -> set:
    seen: Dict[str, int] = {}
    anchors = set()
    in_fence = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m and not in_fence:
            slug = _slug(m.group(1))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


@pytest.mark.parametrize("path", DOC_FILES, ids=[p.relative_to(ROOT).as_posix() for p in DOC_FILES])
def test_local_links_resolve(path: Path) -> None:
    """Links between the documents point at files and headings that exist."""
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"(?ms)^[ \t]*(`{3,}|~{3,}).*?^[ \t]*\1[ \t]*$", "", text)  # drop code blocks
    text = re.sub(r"`[^`\n]*`", "", text)  # and inline code
    broken = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue  # http:, https:, mailto:
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: no heading with anchor #{anchor}")
    assert not broken, f"{path.relative_to(ROOT)}: broken links: {broken}"


def test_index_links_every_page() -> None:
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    for page in sorted((ROOT / "docs").glob("*.md")):
        if page.name != "index.md":
            assert f"({page.name}" in index, f"docs/index.md does not link {page.name}"


def test_api_page_covers_every_public_name() -> None:
    """A name added to the public API without documentation fails here."""
    import ctrlrun.testing

    api = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    names = (
        list(ctrlrun.__all__)
        + list(ctrlrun.testing.__all__)
        + ["ctrlrun_clock", "ctrlrun_store", "ctrlrun_postgres_store", "ctrlrun_assert"]
    )
    missing = [n for n in names if f"`{n}" not in api]
    assert not missing, f"docs/api.md does not document: {missing}"


def test_cli_page_covers_every_command() -> None:
    """Every `ctrlrun` subcommand has a section in docs/cli.md, and every option is mentioned."""
    import click

    from ctrlrun.cli import cli

    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    missing = []

    def walk(group: click.Group, prefix: str) -> None:
        for name, command in group.commands.items():
            path = f"{prefix} {name}"
            if isinstance(command, click.Group):
                walk(command, path)
                continue
            if f"## {path}\n" not in page:
                missing.append(f"section '## {path}'")
            for param in command.params:
                for opt in getattr(param, "opts", []):
                    if opt.startswith("-") and opt not in ("-h", "--help") and f"{opt}" not in page:
                        missing.append(f"{path} {opt}")

    walk(cli, "ctrlrun")
    assert not missing, f"docs/cli.md misses: {missing}"


def test_the_licence_file_matches_the_declared_licence():
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License\n"), text[:40]
    assert "Permission is hereby granted, free of charge" in text
    assert 'license = { text = "MIT" }' in (ROOT / "pyproject.toml").read_text()
    assert 'license = "MIT"' in (ROOT / "Cargo.toml").read_text()

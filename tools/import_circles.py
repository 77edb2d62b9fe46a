#!/usr/bin/env python3
"""Fails when modules import each other in a circle, in the Python package or the Rust core.

    python tools/import_circles.py

Python: every import of a ``ctrlrun`` module by a module of ``python/ctrlrun`` counts, wherever
it stands (top level, inside a function, under ``TYPE_CHECKING``); ``ctrlrun._core`` (the
extension) and a package's own ``__init__`` re-exports of its children are not edges.
Rust: a file's references to ``crate::a::b`` and ``super::…`` paths are edges between the
files of ``src/``, checked twice: between the crate's top-level modules, and between files
neither of which contains the other (a ``mod.rs`` and its children form one facade).
Prints each circle found and exits 1; prints the module counts and exits 0 when there are none.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Set

ROOT = Path(__file__).resolve().parents[1]


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    out: List[List[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in graph:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def python_graph(pkg: Path) -> Dict[str, Set[str]]:
    names: Dict[Path, str] = {}
    for f in pkg.rglob("*.py"):
        parts = list(f.relative_to(pkg.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[f] = ".".join(parts)
    known = set(names.values())
    graph: Dict[str, Set[str]] = {m: set() for m in known}
    for f, mod in names.items():
        is_pkg = f.name == "__init__.py"
        base = mod if is_pkg else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            targets: Iterable[str] = ()
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    anchor = base.split(".")[: len(base.split(".")) - node.level + 1]
                    origin = ".".join(anchor + ([node.module] if node.module else []))
                else:
                    origin = node.module or ""
                targets = [origin] + [f"{origin}.{a.name}" for a in node.names]
            for t in targets:
                while t and t not in known:
                    t = t.rpartition(".")[0]
                if not t or t == mod or t == "ctrlrun._core":
                    continue
                if is_pkg and t.startswith(mod + "."):
                    continue  # a package re-exporting its own children
                if t == "ctrlrun" or (not is_pkg and mod.startswith(t + ".")):
                    continue  # importing a package runs its __init__, not its siblings
                graph[mod].add(t)
    return graph


REF = re.compile(r"\b(crate|super)((?:::\w+)+)")


def rust_graph(src: Path) -> Dict[str, Set[str]]:
    mods: Dict[Path, str] = {}
    for f in src.rglob("*.rs"):
        parts = list(f.relative_to(src).with_suffix("").parts)
        if parts[-1] in ("mod", "lib"):
            parts.pop()
        mods[f] = "::".join(["crate", *parts])
    known = set(mods.values())
    graph: Dict[str, Set[str]] = {m: set() for m in known}
    for f, mod in mods.items():
        own = mod if f.name in ("mod.rs", "lib.rs") else mod.rpartition("::")[0]
        text = re.sub(r"//[^\n]*", "", f.read_text(encoding="utf-8"))
        for head, tail in REF.findall(text):
            path = ("crate" if head == "crate" else own.rpartition("::")[0] or "crate") + tail
            if head == "super" and f.name not in ("mod.rs", "lib.rs"):
                path = own + tail
            while path not in known and "::" in path:
                path = path.rpartition("::")[0]
            if path in known and path != mod:
                graph[mod].add(path)
    return graph


def nested(a: str, b: str) -> bool:
    return a == "crate" or b == "crate" or a.startswith(b + "::") or b.startswith(a + "::")


def main() -> int:
    found: List[str] = []
    py = python_graph(ROOT / "python" / "ctrlrun")
    found += ["python: " + " <-> ".join(c) for c in cycles(py)]
    rs = rust_graph(ROOT / "src")
    top: Dict[str, Set[str]] = {}
    for a, bs in rs.items():
        ta = "::".join(a.split("::")[:2])
        top.setdefault(ta, set())
        for b in bs:
            tb = "::".join(b.split("::")[:2])
            if ta != tb and ta != "crate" and tb != "crate":
                top[ta].add(tb)
    found += ["rust (top-level modules): " + " <-> ".join(c) for c in cycles(top)]
    files = {a: {b for b in bs if not nested(a, b)} for a, bs in rs.items()}
    found += ["rust (files): " + " <-> ".join(c) for c in cycles(files)]
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} import circle(s)")
        return 1
    print(f"no import circles: {len(py)} Python modules, {len(rs)} Rust modules")
    return 0


if __name__ == "__main__":
    sys.exit(main())

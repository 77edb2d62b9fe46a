"""Benchmark worker for this repository's ctrlrun (runs under the interpreter that runs run.py).

Modes (the JSON config's "mode"):
  info     which ctrlrun is imported, and which build (release/debug) its extension is
  init     open the store once (creates the schema), then exit
  latency  N protected calls of a trivial executor on distinct keys, sync or async
  dup      N calls on keys already committed (each refused with DuplicateEffect)
  contend  one of the contention processes: call every key in the given order
"""

from __future__ import annotations

import asyncio
import os
import sys

import _common


def info() -> dict:
    import ctrlrun
    from ctrlrun import _core

    so = os.path.realpath(_core.__file__)
    src_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(so))), "src")
    newest_src = 0.0
    if os.path.isdir(src_dir):  # an editable build: is the extension older than the sources?
        for root, _, files in os.walk(src_dir):
            for f in files:
                if f.endswith(".rs"):
                    newest_src = max(newest_src, os.path.getmtime(os.path.join(root, f)))
    return {
        "version": ctrlrun.__version__,
        "package": os.path.dirname(os.path.realpath(ctrlrun.__file__)),
        "extension": so,
        "extension_bytes": os.path.getsize(so),
        "extension_mtime": os.path.getmtime(so),
        "build": _common.build_profile(so),
        "stale": bool(newest_src and newest_src > os.path.getmtime(so)),
        "python": sys.version.split()[0],
    }


def main() -> None:
    cfg = _common.config()
    mode = cfg["mode"]
    if mode == "info":
        _common.answer(info())
        return

    import ctrlrun

    store = ctrlrun.open_store(cfg["url"])
    if mode == "init":
        store.close()
        _common.answer({"ok": True})
        return

    prefix = cfg.get("prefix", "k")
    n = int(cfg.get("n", 0))
    warmup = int(cfg.get("warmup", 0))

    if mode == "latency" and cfg.get("async"):

        @ctrlrun.protect("bench.effect", effect="bench:{key}", store=store)
        async def effect_async(key: str) -> int:
            return 1

        async def run() -> dict:
            return await _common.time_calls_async(lambda i: effect_async(f"{prefix}{i}"), n, warmup)

        result = asyncio.run(run())
        _common.answer(result)
        return

    marks = cfg.get("marks")

    @ctrlrun.protect("bench.effect", effect="bench:{key}", store=store)
    def effect(key: str) -> int:
        if marks:
            _common.mark(marks, key)
        return 1

    if mode == "latency":
        _common.answer(_common.time_calls(lambda i: effect(f"{prefix}{i}"), n, warmup))
    elif mode == "dup":
        for i in range(-warmup, n):  # commit every key first (not timed)
            effect(f"{prefix}{i}")
        refused = [0]

        def again(i: int) -> None:
            try:
                effect(f"{prefix}{i}")
            except ctrlrun.DuplicateEffect:
                refused[0] += 1
                return
            raise AssertionError(f"a committed key ran again: {prefix}{i}")

        result = _common.time_calls(again, n, warmup)
        result["refused"] = refused[0]
        _common.answer(result)
    elif mode == "contend":
        _common.wait_for_start()
        won = lost = 0
        errors = []
        for key in cfg["keys"]:
            try:
                effect(key)
                won += 1
            except ctrlrun.DuplicateEffect:
                lost += 1
            except Exception as exc:  # reported; the parent fails the row
                errors.append(f"{key}: {type(exc).__name__}: {exc}")
        import time

        _common.answer(
            {
                "won": won,
                "lost": lost,
                "errors": errors[:5],
                "n_errors": len(errors),
                "end": time.time(),
            }
        )
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()

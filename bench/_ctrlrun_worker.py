"""Benchmark worker for this repository's ctrlrun (runs under the interpreter that runs run.py).

Modes (the JSON config's "mode"):
  info     which ctrlrun is imported, and which build (release/debug) its extension is
  init     open the store once (creates the schema), then exit
  latency  N protected calls of a trivial executor on distinct keys, sync or async
  dup      N calls on keys already committed (each refused with DuplicateEffect)
  contend  one of the contention processes: call every key in the given order
"""

from __future__ import annotations

import os
import sys

import _common


def info() -> dict:
    import ctrlrun
    from ctrlrun import _core

    so = os.path.realpath(_core.__file__)
    src_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(so))), "src")
    newest_src = 0.0
    for root, _, files in os.walk(src_dir):  # an editable build: is the extension older?
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
        return _common.answer(info())
    import ctrlrun

    store = ctrlrun.open_store(cfg["url"])
    marks = cfg.get("marks")

    @ctrlrun.protect("bench.effect", effect="bench:{key}", store=store)
    async def effect_async(key: str) -> int:
        return 1

    @ctrlrun.protect("bench.effect", effect="bench:{key}", store=store)
    def effect(key: str) -> int:
        if marks:
            _common.mark(marks, key)
        return 1

    result = _common.run_mode(cfg, effect, effect_async, ctrlrun.DuplicateEffect)
    store.close()
    _common.answer(result)


if __name__ == "__main__":
    main()

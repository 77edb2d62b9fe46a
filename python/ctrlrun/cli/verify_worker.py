"""One worker process of ``ctrlrun verify`` (not public). Reads a JSON config from stdin (it
holds the store URL, password included: never on a command line, which any local user can read),
waits for the common start time, calls one protected executor, prints one JSON report."""

from __future__ import annotations

import inspect
import json
import os
import sys
import time


def main() -> int:
    cfg = json.loads(sys.stdin.readline())
    import ctrlrun

    store = ctrlrun.open_store(cfg["url"])
    marks, mark, pause = cfg["marks"], cfg["mark"], float(cfg["sleep"])

    def executor(**values: str) -> int:
        # One file per execution, created exclusively: a second execution cannot hide.
        name = f"{mark}.{os.getpid()}.{time.monotonic_ns()}"
        os.close(os.open(os.path.join(marks, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        if pause:
            time.sleep(pause)
        return os.getpid()

    executor.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY) for n in cfg["values"]]
    )
    approve = bool(cfg.get("approve"))
    protected = ctrlrun.protect(
        cfg["action"],
        effect=cfg["template"],
        store=store,
        decision="approve" if approve else "allow",
    )(executor)

    def call() -> None:
        """One call; an ``approve`` action's request is granted here, in the scratch store (as
        a person would), and the call made again: the grant must be used once."""
        try:
            protected(**cfg["values"])
        except ctrlrun.ApprovalRequired as exc:
            assert exc.request_id is not None  # the store's refusal always names its request
            try:
                store.grant_approval(
                    exc.request_id,
                    by="ctrlrun verify",
                    note="granted by verify in its scratch store",
                )
            except ctrlrun.InvalidArgument:
                pass  # a sibling worker granted it first
            protected(**cfg["values"])

    delay = float(cfg["start_at"]) - time.time()
    if delay > 0:
        time.sleep(delay)
    report = {
        "worker": cfg["worker"],
        "key": cfg["key"],
        "outcome": "",
        "action_id": None,
        "detail": "",
    }
    try:
        call()
        report["outcome"] = "committed"
        rec = store.get_effect(cfg["key"])
        report["action_id"] = rec.action_id if rec else None
    except ctrlrun.DuplicateEffect as exc:
        report["outcome"] = f"duplicate:{exc.state}"
    except ctrlrun.AmbiguousEffect as exc:
        report["outcome"] = "ambiguous"
        report["detail"] = str(exc)[:200]
    except Exception as exc:
        report["outcome"] = "error"
        report["detail"] = f"{type(exc).__name__}: {exc}"[:300]
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""One worker process of ``ctrlrun soak`` (not public).

Reads a JSON config from stdin (it holds the store URL, password included: never on a command
line, which any local user can read), then calls one protected function over and over on keys
drawn from a small key space that moves on with the run (see ``next_key``), until the run's end
or until the supervisor kills it. Everything it knows goes to files outside the store:

* the protected body appends one line per execution to the worker's own marks file,
  ``<key> <token>``, in one unbuffered write before it returns: a SIGKILL cannot undo it, and
  a second execution of a key, in any process, is a second line;
* each call appends to the worker's own calls file one line when it starts, ``{"k": key}``,
  and one when it ends, ``{"k": key, "o": outcome, "ms": latency}``; a call the library told
  ``ok`` (it returned normally) is written and fsynced right after it returned.

Outcomes: ``ok``; ``refused:committed``, ``refused:in_progress``, ``refused:ambiguous`` (a
``DuplicateEffect`` or ``AmbiguousEffect``: refusals, not errors); ``error:<ExceptionClass>``.
"""

from __future__ import annotations

import collections
import json
import os
import random
import sys
import time
from typing import Any, Deque, Dict, List

from ctrlrun.cli.soak_judge import PREFIX

RECENT = 1000  # the keys a revisit picks from: this worker's last ones


def _open(cfg: Dict[str, Any]) -> Any:
    """The store, opened again and again until it opens or the run ends (a cut connection,
    with ``--faults``, can fail an open)."""
    import ctrlrun

    while True:
        try:
            return ctrlrun.open_store(cfg["url"])
        except ctrlrun.StoreError:
            if os.path.exists(cfg["stop"]):
                raise
            time.sleep(0.05)


def main() -> int:
    cfg = json.loads(sys.stdin.readline())
    import ctrlrun

    rng = random.Random(cfg["seed"])
    pause = float(cfg["pause"])
    t0, period, stop = float(cfg["t0"]), float(cfg["period"]), str(cfg["stop"])
    keys, revisit, parent = int(cfg["keys"]), float(cfg["revisit"]), int(cfg["parent"])
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
    marks, calls = os.open(cfg["marks"], flags, 0o600), os.open(cfg["calls"], flags, 0o600)
    store = _open(cfg)

    @ctrlrun.protect(cfg["action"], effect=PREFIX + "{key}", lease=cfg["lease"], store=store)
    def body(key: str) -> int:
        os.write(marks, f"{key} {ctrlrun.idempotency_token()}\n".encode())
        time.sleep(rng.uniform(0.0, pause))
        return os.getpid()

    def record(line: Dict[str, Any], sync: bool = False) -> None:
        os.write(calls, (json.dumps(line) + "\n").encode())  # unbuffered: survives SIGKILL
        if sync:
            os.fsync(calls)

    # The key space. Each period opens a fresh set of rounds; a round is `keys` keys, and the
    # worker calls each of them once, in a random order, then moves to the next round. Workers
    # in the same period go through the same rounds at the pace the store allows, so each key
    # meets every worker at about the same time: one is told ok, the others are refused (and
    # no worker spins on keys already settled). A replacement joins at the current period. A
    # share of the calls revisit one of the worker's recent keys: committed, or held by a
    # killed worker whose lease has lapsed (that call turns it ambiguous).
    recent: Deque[str] = collections.deque(maxlen=RECENT)
    period_now, round_no = -1, 0
    todo: List[int] = []

    def next_key() -> str:
        nonlocal period_now, round_no, todo
        if recent and rng.random() < revisit:
            return rng.choice(recent)
        now = int((time.time() - t0) / period)
        if now != period_now:
            period_now, round_no, todo = now, 0, []
        if not todo:
            round_no += 1
            todo = rng.sample(range(keys), keys)
        key = f"p{period_now}-r{round_no}-k{todo.pop()}"
        recent.append(key)
        return key

    # Until the supervisor makes the stop file; a worker whose supervisor is gone stops too.
    while not os.path.exists(stop) and os.getppid() == parent:
        key = next_key()
        record({"k": key})
        started = time.perf_counter()
        message = ""
        try:
            body(key=key)
            outcome = "ok"
        except ctrlrun.DuplicateEffect as exc:
            outcome = f"refused:{exc.state}"
        except ctrlrun.AmbiguousEffect:
            outcome = "refused:ambiguous"
        except Exception as exc:
            outcome, message = f"error:{type(exc).__name__}", str(exc)[:300]
        line: Dict[str, Any] = {
            "k": key,
            "o": outcome,
            "ms": round((time.perf_counter() - started) * 1000.0, 3),
        }
        if message:
            line["m"] = message
        record(line, sync=outcome == "ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())

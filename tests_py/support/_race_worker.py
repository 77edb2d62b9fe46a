"""A worker process for test_concurrency.py (not a test module).

Usage: python _race_worker.py, the JSON config on the first line of stdin (it holds the store
URL, password and all: never on a command line).

Config: {"url": store URL, "marks": dir, "keys": [...], "sleep": seconds in the body,
"threads": how many threads call (default 1; each walks the keys in its own shuffled order),
"retry": seconds (default 0) each thread may spend trying calls that failed with a StoreError
again (every 0.1 s) before such a failure counts as "other", "ok_file": a file each call that returned is appended to as a line
"<key> <epoch seconds>", fsynced before the next call}
Protocol: opens the store, prints "ready", waits for a line on stdin holding the start time
(epoch seconds), sleeps until then, calls the protected function once per key in order, then
prints one JSON line: {"pid": ..., "ran": [...], "dup": [[key, state], ...],
"other": [[key, repr], ...], "errors": [[key, error type], ...]} (the StoreErrors retried).
Each execution of the body creates a file "<key>.<uuid4>" in `marks` with O_CREAT|O_EXCL, so
the parent counts real executions from the file system. Exit 0 unless something other than
success or DuplicateEffect happened.
"""

import json
import os
import random
import sys
import threading
import time
import uuid


def main() -> int:
    cfg = json.loads(sys.stdin.readline())
    import ctrlrun

    store = ctrlrun.open_store(cfg["url"])
    marks = cfg["marks"]
    pause = float(cfg.get("sleep", 0))

    @ctrlrun.protect("race.effect", effect="{key}", store=store)
    def effect(key):
        fd = os.open(
            os.path.join(marks, f"{key}.{uuid.uuid4().hex}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY
        )
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        if pause:
            time.sleep(pause)
        return os.getpid()

    print("ready", flush=True)
    start_at = float(sys.stdin.readline())
    delay = start_at - time.time()
    if delay > 0:
        time.sleep(delay)

    ran, dup, other, store_errors = [], [], [], []
    lock = threading.Lock()
    retry = float(cfg.get("retry", 0))
    ok_file = open(cfg["ok_file"], "a") if cfg.get("ok_file") else None

    def call(key, budget):
        while True:
            try:
                return effect(key)
            except ctrlrun.StoreError as e:
                if budget[0] <= 0:
                    raise
                with lock:
                    store_errors.append([key, type(e).__name__])
                budget[0] -= 0.1
                time.sleep(0.1)

    def walk(keys):
        budget = [retry]  # this thread's seconds of retrying left
        for key in keys:
            try:
                call(key, budget)
                outcome = (ran, key)
            except ctrlrun.DuplicateEffect as e:
                outcome = (dup, [key, e.state])
            except BaseException as e:  # reported, and the exit status says so
                outcome = (other, [key, f"{type(e).__name__}: {e}"])
            with lock:
                outcome[0].append(outcome[1])
                if ok_file is not None and outcome[0] is ran:
                    ok_file.write(f"{key} {time.time()!r}\n")
                    ok_file.flush()
                    os.fsync(ok_file.fileno())

    n_threads = int(cfg.get("threads", 1))
    if n_threads == 1:
        walk(cfg["keys"])
    else:
        orders = []
        for i in range(n_threads):
            order = list(cfg["keys"])
            random.Random(os.getpid() * 100 + i).shuffle(order)
            orders.append(order)
        threads = [threading.Thread(target=walk, args=(o,)) for o in orders]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    report = {"pid": os.getpid(), "ran": ran, "dup": dup, "other": other, "errors": store_errors}
    print(json.dumps(report), flush=True)
    return 1 if other else 0


if __name__ == "__main__":
    sys.exit(main())

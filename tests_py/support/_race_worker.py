"""A worker process for test_concurrency.py (not a test module).

Usage: python _race_worker.py '<json config>'

Config: {"url": store URL, "marks": dir, "keys": [...], "sleep": seconds in the body,
"threads": how many threads call (default 1; each walks the keys in its own shuffled order)}
Protocol: opens the store, prints "ready", waits for a line on stdin holding the start time
(epoch seconds), sleeps until then, calls the protected function once per key in order, then
prints one JSON line: {"pid": ..., "ran": [...], "dup": [[key, state], ...],
"other": [[key, repr], ...]}.
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
    cfg = json.loads(sys.argv[1])
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

    ran, dup, other = [], [], []
    lock = threading.Lock()

    def walk(keys):
        for key in keys:
            try:
                effect(key)
                outcome = (ran, key)
            except ctrlrun.DuplicateEffect as e:
                outcome = (dup, [key, e.state])
            except BaseException as e:  # reported, and the exit status says so
                outcome = (other, [key, f"{type(e).__name__}: {e}"])
            with lock:
                outcome[0].append(outcome[1])

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
    print(json.dumps({"pid": os.getpid(), "ran": ran, "dup": dup, "other": other}), flush=True)
    return 1 if other else 0


if __name__ == "__main__":
    sys.exit(main())

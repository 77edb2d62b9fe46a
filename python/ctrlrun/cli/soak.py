"""``ctrlrun soak``: a bounded run of many OS processes calling one protected function over a
few colliding keys, in a scratch store on the user's backend, while the supervisor kills
workers with SIGKILL at random moments and starts replacements (and, with ``--faults`` on
PostgreSQL, a local proxy cuts their connections). Then it counts, outside the store, the keys
that ran more than once and the calls told ``ok`` whose key is not committed.

The supervisor is here; a worker is :mod:`ctrlrun.cli.soak_worker`, the proxy
:mod:`ctrlrun.cli.soak_proxy`, the judgement the pure :func:`ctrlrun.cli.soak_judge.judge`.
What a soak does and does not establish: docs/soak.md.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import click

import ctrlrun._core as _core
from ctrlrun.cli._common import die, given_url, require_posix, store_option
from ctrlrun.cli._scratch import Scratch, start_worker
from ctrlrun.cli.soak_judge import PREFIX, Recorded, Report, judge
from ctrlrun.cli.soak_proxy import CuttingProxy, NotProxied, proxied_url, upstream_of
from ctrlrun.errors import CTRLRunError
from ctrlrun.store.api import open_store

__all__ = ["soak", "run_soak", "Plan"]

ACTION = "ctrlrun.soak"
LEASE = 2.0  # seconds: a killed worker's key lapses soon, and is met as ambiguous
PERIOD = 1.0  # seconds: each period opens fresh rounds of keys (soak_worker.py)
REVISIT = 0.1  # the share of calls that revisit one of the worker's recent keys
PAUSE = 0.005  # seconds: the body sleeps up to this long, so kills land in bodies too
KILL_EVERY = (0.15, 0.75)  # seconds between two kills, drawn uniformly
CUT_EVERY = (0.1, 0.6)  # seconds between two cuts (--faults), drawn uniformly
GRACE = 60.0  # seconds the workers get to finish their last call (SQLite waits up to 30 s)
STARTUP = 60.0  # seconds the first workers get to end one call before the run's clock starts
SAMPLES = 100_000  # latencies kept (a uniform sample beyond that)


@dataclass(frozen=True)
class Plan:
    seconds: int
    processes: int
    faults: bool = False


class _Workers:
    """The worker processes of one run: started, killed, replaced, stopped."""

    def __init__(self, cfg: Dict[str, Any], folder: str, rng: random.Random) -> None:
        self.cfg, self.folder, self.rng = cfg, folder, rng
        self.live: Dict[int, subprocess.Popen[bytes]] = {}
        self.started = self.kills = self.exited = self.forced = 0
        # the exit status and last stderr line of the last worker that exited on its own
        self.last_exit: Optional[str] = None
        for sub in ("marks", "calls", "logs"):
            os.mkdir(os.path.join(folder, sub))

    def _path(self, sub: str, n: int, ext: str) -> str:
        return os.path.join(self.folder, sub, f"{n}.{ext}")

    def spawn(self) -> None:
        self.started += 1
        n = self.started
        cfg = dict(
            self.cfg,
            seed=self.rng.getrandbits(64),
            marks=self._path("marks", n, "log"),
            calls=self._path("calls", n, "jsonl"),
        )
        with open(self._path("logs", n, "err"), "wb") as err:
            self.live[n] = start_worker(
                "ctrlrun.cli.soak_worker",
                cfg,
                self.folder,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,  # a Ctrl-C reaches the supervisor, which stops them
            )

    def reap(self, respawn: bool) -> None:
        """Forget the workers that exited on their own; before the end, replace them."""
        for n, proc in list(self.live.items()):
            if proc.poll() is None:
                continue
            del self.live[n]
            if respawn:
                self.exited += 1
                self.last_exit = f"exit {proc.returncode}: {self._tail(n)}"
                self.spawn()

    def _tail(self, n: int) -> str:
        try:
            with open(self._path("logs", n, "err"), errors="replace") as f:
                lines = [ln.strip() for ln in f if ln.strip()]
        except OSError:
            lines = []
        return lines[-1][:300] if lines else "no output"

    def _calling(self, n: int) -> bool:
        try:
            return os.path.getsize(self._path("calls", n, "jsonl")) > 0
        except OSError:
            return False

    def _ended_a_call(self, n: int) -> bool:
        try:
            with open(self._path("calls", n, "jsonl"), "rb") as f:
                return b'"o":' in f.read(4096)
        except OSError:
            return False

    def wait_ready(self, timeout: float) -> None:
        """Wait until every worker has ended one call (or one exited, or ``timeout``): the
        run's seconds count from there, so a slow start (a loaded machine takes a second or
        more to import Python) does not eat a short run."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.live.values()):
                return
            if all(self._ended_a_call(n) for n in self.live):
                return
            time.sleep(0.02)

    def signal_stop(self) -> None:
        """Tell every worker, the ones still starting included, to stop after its call."""
        with open(self.cfg["stop"], "wb"):
            pass

    def kill_one(self) -> bool:
        """SIGKILL a worker that has started calling, at random, and start a replacement."""
        ready = [n for n in self.live if self._calling(n)]
        if not ready:
            return False
        _kill(self.live.pop(self.rng.choice(ready)))
        self.kills += 1
        self.spawn()
        return True

    def stop(self, grace: float) -> None:
        """Wait for the workers to finish their last call; kill the ones still running."""
        deadline = time.monotonic() + grace
        for proc in self.live.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.forced += 1
        self.kill_all()

    def kill_all(self) -> None:
        for proc in self.live.values():
            if proc.poll() is None:
                _kill(proc)
        self.live.clear()


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL, and reap it (a process stuck in the kernel is left to finish dying)."""
    proc.send_signal(signal.SIGKILL)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _read_calls(folder: str, rng: random.Random) -> Dict[str, Any]:
    """What the workers' calls files hold: calls started, endings by outcome, the key of each
    call told ok, a sample of the latencies, one message per kind of error."""
    attempted, ended = 0, Counter[str]()
    ok_keys: List[str] = []
    latencies: List[float] = []
    samples: Dict[str, str] = {}
    for name in sorted(os.listdir(os.path.join(folder, "calls"))):
        with open(os.path.join(folder, "calls", name), encoding="utf-8", errors="replace") as f:
            for raw in f:
                try:
                    line = json.loads(raw)
                except ValueError:
                    continue  # not written whole (a write cannot be cut by SIGKILL, but still)
                if "o" not in line:
                    attempted += 1
                    continue
                outcome = line["o"]
                ended[outcome] += 1
                if outcome == "ok":
                    ok_keys.append(line["k"])
                if outcome.startswith("error:") and "m" in line:
                    samples.setdefault(outcome[len("error:") :], line["m"])
                n = sum(ended.values())
                if len(latencies) < SAMPLES:
                    latencies.append(float(line["ms"]))
                elif rng.random() < SAMPLES / n:  # a uniform sample of all of them
                    latencies[rng.randrange(SAMPLES)] = float(line["ms"])
    return {
        "attempted": attempted,
        "ended": dict(ended),
        "ok_keys": ok_keys,
        "latencies_ms": latencies,
        "samples": samples,
    }


def _executions(folder: str) -> Dict[str, int]:
    """Executions per key: the lines of the workers' marks files (``<key> <token>``)."""
    counts = Counter[str]()
    for name in os.listdir(os.path.join(folder, "marks")):
        with open(os.path.join(folder, "marks", name), encoding="utf-8", errors="replace") as f:
            counts.update(line.split(" ", 1)[0] for line in f if line.strip())
    return dict(counts)


def _rows(url: str) -> Dict[str, str]:
    with open_store(url) as store:
        return {
            r.effect_key[len(PREFIX) :]: r.state.value
            for r in store.list_effects()
            if r.effect_key.startswith(PREFIX)
        }


class Bar:
    """The progress bar over the run's seconds, on standard error (none when ``quiet``)."""

    def __init__(self, seconds: int, quiet: bool) -> None:
        self.seconds, self.quiet = seconds, quiet
        self._bar: Any = None

    def update(self, n: int) -> None:
        if self.quiet:
            return
        if self._bar is None:
            self._bar = click.progressbar(
                length=self.seconds, label="soak: running", file=sys.stderr, show_eta=True
            )
            self._bar.__enter__()
        self._bar.update(n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None


def _supervise(workers: _Workers, plan: Plan, bar: Bar, proxy: Optional[CuttingProxy]) -> float:
    """Run the workers for ``plan.seconds``, killing one at random intervals; returns how
    long they ran."""
    rng = workers.rng
    for _ in range(plan.processes):
        workers.spawn()
    workers.wait_ready(STARTUP)
    start = time.monotonic()
    end = start + plan.seconds
    next_kill, shown = start + rng.uniform(*KILL_EVERY), 0
    while True:
        now = time.monotonic()
        if now >= end:
            break
        workers.reap(respawn=now < end - 0.5)
        if now >= next_kill:
            next_kill = now + (rng.uniform(*KILL_EVERY) if workers.kill_one() else 0.05)
        if int(now - start) > shown:
            bar.update(int(now - start) - shown)
            shown = int(now - start)
        time.sleep(max(0.0, min(0.05, end - now)))
    workers.signal_stop()
    bar.update(plan.seconds - shown)
    bar.close()
    if proxy is not None:
        proxy.stop_cutting()
    return time.monotonic() - start


def run_soak(
    user_url: str, plan: Plan, progress: Callable[[str], None], bar: Bar
) -> Tuple[Report, Dict[str, Any]]:
    """Run one soak in a scratch store on ``user_url``'s backend; the report, and what ran."""
    backend = _core.url_backend(user_url)
    upstream = upstream_of(user_url) if plan.faults else None
    rng = random.Random()
    folder = tempfile.mkdtemp(prefix="ctrlrun-soak-run-")
    scratch = Scratch(user_url, progress, name="soak")
    try:
        with scratch as url:
            proxy = None if upstream is None else CuttingProxy(upstream, CUT_EVERY)
            t0 = time.time()
            cfg = {
                "url": url if proxy is None else proxied_url(url, proxy.port),
                "action": ACTION,
                "lease": LEASE,
                "keys": max(2, plan.processes),
                "period": PERIOD,
                "revisit": REVISIT,
                "pause": PAUSE,
                "t0": t0,
                "stop": os.path.join(folder, "stop"),
                "parent": os.getpid(),
            }
            workers = _Workers(cfg, folder, rng)
            try:
                if proxy is not None:
                    proxy.__enter__()
                progress(f"{plan.processes} workers for {plan.seconds} s")
                ran = _supervise(workers, plan, bar, proxy)
                progress("stopping the workers")
                workers.stop(GRACE)
            finally:
                workers.kill_all()
                if proxy is not None:
                    proxy.close()
            recorded = Recorded(
                seconds=ran,
                executions=_executions(folder),
                rows=_rows(url),
                kills=workers.kills,
                cuts=None if proxy is None else proxy.cuts,
                **_read_calls(folder, rng),
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    about = {
        "backend": backend,
        "scratch_store": scratch.shown,
        "seconds": plan.seconds,
        "processes": plan.processes,
        "faults": plan.faults,
        "lease_s": LEASE,
        "workers_started": workers.started,
        "workers_exited": workers.exited,
        "workers_last_exit": workers.last_exit,
        "workers_stopped_by_force": workers.forced,
    }
    return judge(recorded), about


def _bounded(name: str, lo: int, hi: int, default: int, what: str) -> Callable[[Any], Any]:
    return click.option(
        name,
        type=click.IntRange(lo, hi),
        metavar="N",
        default=default,
        show_default=True,
        help=f"{what}.",
    )


@click.command()
@store_option
@_bounded("--seconds", 1, 86400, 30, "How long the workers run")
@_bounded("--processes", 1, 64, 4, "Worker processes at a time")
@click.option(
    "--faults",
    is_flag=True,
    help="PostgreSQL only: the workers connect through a local proxy that cuts connections "
    "at random times.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def soak(
    store_url: Optional[str], seconds: int, processes: int, faults: bool, as_json: bool
) -> None:
    """Soak your backend in a scratch store: worker processes call a protected function over
    a few colliding keys while some are killed at random; then count the keys that ran twice
    and the calls told ok that were lost. Your data is never opened."""
    require_posix("ctrlrun soak")
    try:
        user_url = given_url(store_url)
        if faults and _core.url_backend(user_url) != "postgres":
            die(
                "--faults applies to a PostgreSQL store only (it cuts the workers' network "
                "connections; a SQLite store has none): soak without it"
            )
        if faults:
            upstream_of(user_url)
    except CTRLRunError as exc:
        die(str(exc))
    except NotProxied as exc:
        die(f"--faults cannot put its proxy in front of this store URL: {exc}")
    quiet = lambda msg: None  # noqa: E731
    progress = quiet if as_json else lambda msg: click.echo(f"soak: {msg}…", err=True)
    bar = Bar(seconds, quiet=as_json)
    try:
        report, about = run_soak(user_url, Plan(seconds, processes, faults), progress, bar)
    except CTRLRunError as exc:
        die(str(exc))
    except KeyboardInterrupt:
        die("interrupted: the workers were stopped and the scratch store removed", 130)
    finally:
        bar.close()
    if as_json:
        first = {k: getattr(report, k) for k in ("verdict", "doubles", "lost", "calls", "errors")}
        click.echo(json.dumps({**first, **report.as_dict(), **about}, indent=2))
    else:
        plural = "es" if processes != 1 else ""
        what = f"{about['backend']}, {processes} process{plural}, {seconds} s"
        for line in report.lines(what + (", faults" if faults else "")):
            click.echo(line)
        if about["workers_exited"]:
            click.echo(
                f"  {about['workers_exited']} worker(s) exited on their own; the last: "
                f"{about['workers_last_exit']}"
            )
    sys.exit(report.exit_status())

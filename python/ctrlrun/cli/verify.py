"""``ctrlrun verify``: prove G3 and G4 on the user's backend, in a scratch store of its own.

* **G3, duplicate effect refused**: an attempt commits; a second attempt on the same key (another
  OS process) is refused with ``DuplicateEffect(committed)``; the executor ran once; the row
  still holds attempt 1 and the first action id.
* **G4, one winner under concurrency**: control leg, 8 OS processes on 8 different keys all
  commit; contended leg, 8 OS processes on one key: exactly one commits, the executor ran once,
  the row is committed.

Each leg has a positive control, and a failed control is a failure, never a pass. The judging
functions (:func:`judge_g3`, :func:`judge_g4`) are pure, so they are tested on recorded outcomes.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import ctrlrun._core as _core
from ctrlrun.cli._scratch import Scratch, start_worker
from ctrlrun.policy import Policy, load_policy
from ctrlrun.store.api import Store, default_url, open_store

__all__ = ["WorkerOutcome", "Row", "Verdict", "judge_g3", "judge_g4", "run_verify"]

WORKERS = 8
WORKER_TIMEOUT = 120.0
BUILTIN = ("ctrlrun.verify", "verify:{item}")


@dataclass(frozen=True)
class WorkerOutcome:
    """What one worker process reported. ``outcome`` is ``committed``,
    ``duplicate:committed``, ``duplicate:in_progress``, ``ambiguous``, ``error``, ``crashed``
    (no report, or a non-zero exit) or ``timeout``."""

    worker: int
    key: str
    outcome: str
    action_id: Optional[str] = None
    detail: str = ""


@dataclass(frozen=True)
class Row:
    """The row a leg left behind (``None`` where there is none)."""

    state: str
    attempt: int
    action_id: str


@dataclass(frozen=True)
class Verdict:
    guarantee: str  # "G3" | "G4"
    status: str  # "pass" | "fail" | "n/a"
    reason: str
    action: str = ""

    def line(self) -> str:
        who = f" [{self.action}]" if self.action else ""
        title = {"G3": "duplicate effect refused", "G4": "one winner under concurrency"}
        return (
            f"{self.guarantee} {title[self.guarantee]}{who}: {self.status.upper()} - {self.reason}"
        )


def _bad(w: WorkerOutcome) -> str:
    return (
        f"worker {w.worker} on {w.key!r}: {w.outcome}{(' (' + w.detail + ')') if w.detail else ''}"
    )


def judge_g3(
    first: WorkerOutcome,
    second: WorkerOutcome,
    executions: int,
    row: Optional[Row],
    action: str = "",
) -> Verdict:
    """G3 from the two attempts' reports, the executions counted, and the row afterwards."""

    fail = functools.partial(Verdict, "G3", "fail", action=action)

    if first.outcome != "committed":
        return fail(f"control failed: the first attempt did not commit ({_bad(first)})")
    if second.outcome != "duplicate:committed":
        return fail(f"the second attempt was not refused as a committed duplicate ({_bad(second)})")
    if executions != 1:
        return fail(f"the executor ran {executions} times for one key")
    if row is None:
        return fail("no row was left for the key")
    if row.state != "committed" or row.attempt != 1 or row.action_id != first.action_id:
        return fail(
            f"the row changed: {row.state}, attempt {row.attempt}, action {row.action_id} "
            f"(expected committed, attempt 1, action {first.action_id})"
        )
    return Verdict(
        "G3",
        "pass",
        "the second attempt got DuplicateEffect(committed); the executor ran once; the row kept "
        "attempt 1 and the first action id",
        action,
    )


def judge_g4(
    control: Sequence[WorkerOutcome],
    control_executions: Dict[str, int],
    control_rows: Dict[str, Optional[Row]],
    contended: Sequence[WorkerOutcome],
    contended_executions: int,
    contended_row: Optional[Row],
    action: str = "",
) -> Verdict:
    """G4 from both legs' reports, executions counted per key, and the rows afterwards."""

    fail = functools.partial(Verdict, "G4", "fail", action=action)

    if len(control) != WORKERS or len({w.key for w in control}) != WORKERS:
        return fail(
            f"control failed: expected {WORKERS} workers on {WORKERS} keys, "
            f"got {len(control)} on {len({w.key for w in control})}"
        )
    for w in control:
        if w.outcome != "committed":
            return fail(f"control failed: {_bad(w)}")
        if control_executions.get(w.key, 0) != 1:
            return fail(
                f"control failed: key {w.key!r} ran {control_executions.get(w.key, 0)} times"
            )
        row = control_rows.get(w.key)
        if row is None or row.state != "committed":
            return fail(f"control failed: key {w.key!r} is {row.state if row else 'missing'}")
    if len(contended) != WORKERS:
        return fail(f"expected {WORKERS} contending workers, got {len(contended)}")
    broken = [
        w for w in contended if not (w.outcome == "committed" or w.outcome.startswith("duplicate:"))
    ]
    if broken:
        return fail(f"a contender neither won nor was refused: {_bad(broken[0])}")
    winners = [w for w in contended if w.outcome == "committed"]
    if len(winners) != 1:
        return fail(f"{len(winners)} contenders committed one key (exactly one must)")
    if contended_executions != 1:
        return fail(f"the executor ran {contended_executions} times for one key")
    if contended_row is None or contended_row.state != "committed":
        return fail(
            f"the contended key is {contended_row.state if contended_row else 'missing'}, not committed"
        )
    if contended_row.action_id != winners[0].action_id:
        return fail("the contended row names another action than the winner's")
    return Verdict(
        "G4",
        "pass",
        f"control: {WORKERS} processes on {WORKERS} keys all committed; contended: {WORKERS} "
        f"processes on one key, one committed, {WORKERS - 1} refused, the executor ran once",
        action,
    )


# -- running it --------------------------------------------------------------------------
def _placeholders(template: str) -> List[str]:
    return list(_core.Template(template).placeholders)


def _run_workers(configs: List[Dict[str, Any]]) -> List[WorkerOutcome]:
    # Workers run in the scratch marks folder with no policy of the user's in sight: the
    # action's template is passed to them explicitly.
    start_at = time.time() + 1.0 + 0.05 * len(configs)
    procs = [
        start_worker(
            "ctrlrun.cli.verify_worker",
            dict(cfg, start_at=start_at),
            cfg["marks"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for cfg in configs
    ]
    outcomes = []
    deadline = time.monotonic() + WORKER_TIMEOUT
    for cfg, p in zip(configs, procs):
        try:
            out, err = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            outcomes.append(
                WorkerOutcome(
                    cfg["worker"],
                    cfg["key"],
                    "timeout",
                    detail=f"no report within {WORKER_TIMEOUT:.0f} s",
                )
            )
            continue
        lines = out.strip().splitlines()
        try:
            report = json.loads(lines[-1])
            outcomes.append(WorkerOutcome(**report))
        except (IndexError, ValueError, TypeError):
            tail = (err.strip().splitlines() or ["no output"])[-1]
            outcomes.append(
                WorkerOutcome(
                    cfg["worker"], cfg["key"], "crashed", detail=f"exit {p.returncode}: {tail}"
                )
            )
    return outcomes


def _row(store: Store, key: str) -> Optional[Row]:
    rec = store.get_effect(key)
    return None if rec is None else Row(rec.state.value, rec.attempt, rec.action_id)


def _executions(marks: str, key_ids: Dict[str, str]) -> Dict[str, int]:
    counts = {k: 0 for k in key_ids}
    by_id = {v: k for k, v in key_ids.items()}
    for name in os.listdir(marks):
        kid = name.split(".", 1)[0]
        if kid in by_id:
            counts[by_id[kid]] += 1
    return counts


def _cfg(
    url: str,
    action: str,
    template: str,
    names: List[str],
    marks: str,
    worker: int,
    tag: str,
    sleep: float,
    approve: bool = False,
) -> Dict[str, Any]:
    values = {n: f"verify-{tag}" for n in names}
    key = _core.Template(template).render([values[n] for n in names])
    return {
        "url": url,
        "action": action,
        "template": template,
        "values": values,
        "key": key,
        "marks": marks,
        "worker": worker,
        "sleep": sleep,
        "mark": tag,
        "approve": approve,
    }


def _check_g3(
    user_url: str,
    action: str,
    template: str,
    run: str,
    progress: Callable[[str], None],
    approve: bool = False,
) -> Verdict:
    names = _placeholders(template)
    marks = tempfile.mkdtemp(prefix="ctrlrun-verify-marks-")
    try:
        with Scratch(user_url, progress) as url:
            progress(f"G3 [{action}]: one attempt commits, a second process retries the same key")
            first_cfg = _cfg(url, action, template, names, marks, 0, f"{run}-g3", 0.0, approve)
            first = _run_workers([first_cfg])[0]
            second = _run_workers([dict(first_cfg, worker=1)])[0]
            key = first_cfg["key"]
            with open_store(url) as store:
                row = _row(store, key)
            return judge_g3(
                first, second, _executions(marks, {key: first_cfg["mark"]})[key], row, action
            )
    finally:
        shutil.rmtree(marks, ignore_errors=True)


def _check_g4(
    user_url: str,
    action: str,
    template: str,
    run: str,
    approve: bool,
    progress: Callable[[str], None],
) -> Verdict:
    names = _placeholders(template)
    # The control leg needs 8 different keys: a literal template names one consequence, so its
    # control runs the built-in template (the contended leg still uses the action's own key).
    c_action, c_template = (action, template) if names else BUILTIN
    c_names = _placeholders(c_template)
    marks = tempfile.mkdtemp(prefix="ctrlrun-verify-marks-")
    try:
        with Scratch(user_url, progress) as url:
            progress(f"G4 [{action}]: control leg, {WORKERS} processes on {WORKERS} different keys")
            control_cfgs = [
                _cfg(
                    url,
                    c_action,
                    c_template,
                    c_names,
                    marks,
                    i,
                    f"{run}-c{i}",
                    0.2,
                    approve and c_action == action,
                )
                for i in range(WORKERS)
            ]
            control = _run_workers(control_cfgs)
            control_exec = _executions(marks, {c["key"]: c["mark"] for c in control_cfgs})
            progress(f"G4 [{action}]: contended leg, {WORKERS} processes on one key")
            contended_cfgs = [
                _cfg(url, action, template, names, marks, i, f"{run}-x", 0.2, approve)
                for i in range(WORKERS)
            ]
            contended = _run_workers(contended_cfgs)
            key = contended_cfgs[0]["key"]
            with open_store(url) as store:
                control_rows = {c["key"]: _row(store, c["key"]) for c in control_cfgs}
                row = _row(store, key)
            return judge_g4(
                control,
                control_exec,
                control_rows,
                contended,
                _executions(marks, {key: contended_cfgs[0]["mark"]})[key],
                row,
                action,
            )
    finally:
        shutil.rmtree(marks, ignore_errors=True)


def run_verify(
    store_url: Optional[str], policy: Optional[str], progress: Callable[[str], None]
) -> List[Verdict]:
    """Run G3 and G4, each in a scratch store of its own on ``store_url``'s backend (default:
    the default store's); per action with an effect template when a policy is given."""
    user_url = store_url or default_url()
    _core.sqlite_path(user_url)  # a URL no store accepts is bad usage, before any work
    targets: List[Tuple[str, str]] = []
    approving = set()  # approve actions: each worker grants its own request in the scratch store
    skipped: List[Verdict] = []
    if policy is not None:
        pol: Policy = load_policy(policy)
        for a in pol.actions.values():
            if a.effect is not None and a.decision in ("allow", "approve"):
                targets.append((a.name, a.effect))
                if a.decision == "approve":
                    approving.add(a.name)
            else:
                why = (
                    "denied by the policy: it never runs"
                    if a.decision == "deny"
                    else "no effect template: it runs unreserved"
                )
                skipped += [Verdict("G3", "n/a", why, a.name), Verdict("G4", "n/a", why, a.name)]
        if not targets and not skipped:
            why = f"the policy {policy} declares no actions"
            skipped = [Verdict("G3", "n/a", why), Verdict("G4", "n/a", why)]
    else:
        targets.append(BUILTIN)
    run = uuid.uuid4().hex[:10]
    verdicts: List[Verdict] = []
    for action, template in targets:
        approve = action in approving
        verdicts.append(_check_g3(user_url, action, template, run, progress, approve))
        verdicts.append(_check_g4(user_url, action, template, run, approve, progress))
    return verdicts + skipped


def report(verdicts: Sequence[Verdict]) -> int:
    """Exit status: 0 when every applicable guarantee passed, 1 otherwise."""
    applicable = [v for v in verdicts if v.status != "n/a"]
    if any(v.status != "pass" for v in applicable):
        return 1
    return 0

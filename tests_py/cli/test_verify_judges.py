"""``ctrlrun verify``'s pure judges, fed recorded outcomes (they must fail whenever a guarantee or a
control failed), and its exit status."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ctrlrun.cli import verify as _verify
from ctrlrun.cli.verify import Row, Verdict, WorkerOutcome, judge_g3, judge_g4

# --------------------------------------------------------------------------------------------
# the judges, on recorded outcomes
# --------------------------------------------------------------------------------------------

A1 = "act_" + "1" * 32
A2 = "act_" + "2" * 32


def g3_good():
    return dict(
        first=WorkerOutcome(0, "verify:k", "committed", A1),
        second=WorkerOutcome(1, "verify:k", "duplicate:committed"),
        executions=1,
        row=Row("committed", 1, A1),
    )


def g4_good():
    control = [WorkerOutcome(i, f"verify:c{i}", "committed", f"act_{i:032x}") for i in range(8)]
    contended = [WorkerOutcome(0, "verify:x", "committed", A1)] + [
        WorkerOutcome(i, "verify:x", "duplicate:in_progress" if i % 2 else "duplicate:committed")
        for i in range(1, 8)
    ]
    return dict(
        control=control,
        control_executions={w.key: 1 for w in control},
        control_rows={w.key: Row("committed", 1, w.action_id) for w in control},
        contended=contended,
        contended_executions=1,
        contended_row=Row("committed", 1, A1),
    )


def test_judge_g3_pass():
    v = judge_g3(**g3_good(), action="billing.refund")
    assert v == Verdict("G3", "pass", v.reason, "billing.refund")
    assert v.status == "pass"
    assert v.line().startswith("G3 duplicate effect refused [billing.refund]: PASS - ")


def test_judge_g4_pass():
    v = judge_g4(**g4_good())
    assert v.status == "pass", v.reason
    assert v.guarantee == "G4"
    assert v.line().startswith("G4 one winner under concurrency: PASS - ")


def g3_with(**changes):
    args = g3_good()
    args.update(changes)
    return judge_g3(**args)


def g4_with(**changes):
    args = g4_good()
    args.update(changes)
    return judge_g4(**args)


@pytest.mark.parametrize(
    "changes,needles",
    [
        # two winners: the second attempt committed too
        (dict(second=WorkerOutcome(1, "verify:k", "committed", A2)), ["not refused", "committed"]),
        # the second attempt not refused as a committed duplicate
        (
            dict(second=WorkerOutcome(1, "verify:k", "duplicate:in_progress")),
            ["not refused", "duplicate:in_progress"],
        ),
        (
            dict(second=WorkerOutcome(1, "verify:k", "ambiguous", detail="lease lapsed")),
            ["not refused", "ambiguous", "lease lapsed"],
        ),
        (
            dict(second=WorkerOutcome(1, "verify:k", "error", detail="StoreError: disk full")),
            ["not refused", "disk full"],
        ),
        # the executor ran twice (or never)
        (dict(executions=2), ["ran 2 times"]),
        (dict(executions=0), ["ran 0 times"]),
        # a failed control: the first attempt did not commit
        (
            dict(first=WorkerOutcome(0, "verify:k", "error", detail="StoreWriteFailed: busy")),
            ["control failed", "busy"],
        ),
        # a worker that crashed, one that timed out
        (
            dict(first=WorkerOutcome(0, "verify:k", "crashed", detail="exit 1: boom")),
            ["control failed", "crashed", "exit 1: boom"],
        ),
        (
            dict(second=WorkerOutcome(1, "verify:k", "crashed", detail="exit -9: no output")),
            ["crashed", "exit -9"],
        ),
        (
            dict(first=WorkerOutcome(0, "verify:k", "timeout", detail="no report within 120 s")),
            ["control failed", "timeout"],
        ),
        (dict(second=WorkerOutcome(1, "verify:k", "timeout")), ["timeout"]),
        # the row left behind
        (dict(row=None), ["no row"]),
        (dict(row=Row("ambiguous", 1, A1)), ["ambiguous", "expected committed"]),
        (dict(row=Row("executing", 1, A1)), ["executing"]),
        (dict(row=Row("committed", 2, A1)), ["attempt 2"]),
        (dict(row=Row("committed", 1, A2)), [A2, A1]),
    ],
)
def test_judge_g3_fails(changes, needles):
    v = g3_with(**changes, action="x.y")
    assert v.status == "fail", v
    assert v.guarantee == "G3" and v.action == "x.y"
    for n in needles:
        assert n in v.reason, (n, v.reason)
    assert ": FAIL - " in v.line()


def _contended(outcomes):
    return [
        WorkerOutcome(
            i,
            "verify:x",
            o,
            A1 if o == "committed" and i == 0 else (A2 if o == "committed" else None),
        )
        for i, o in enumerate(outcomes)
    ]


def _control_replaced(index, outcome, detail=""):
    good = g4_good()["control"]
    w = good[index]
    return [*good[:index], replace(w, outcome=outcome, detail=detail), *good[index + 1 :]]


@pytest.mark.parametrize(
    "changes,needles",
    [
        # two winners on the contended key
        (
            dict(contended=_contended(["committed", "committed"] + ["duplicate:in_progress"] * 6)),
            ["2 contenders committed"],
        ),
        # nobody won: a contended leg without its positive result
        (dict(contended=_contended(["duplicate:in_progress"] * 8)), ["0 contenders committed"]),
        # the executor ran twice on the contended key
        (dict(contended_executions=2), ["ran 2 times"]),
        # control leg: a worker that did not commit, a key that ran 0 times / twice, a bad row
        (
            dict(control=_control_replaced(3, "duplicate:in_progress")),
            ["control failed", "worker 3", "duplicate:in_progress"],
        ),
        (
            dict(control=_control_replaced(5, "error", "StoreWriteFailed: locked")),
            ["control failed", "locked"],
        ),
        (
            dict(control_executions={**{f"verify:c{i}": 1 for i in range(8)}, "verify:c2": 0}),
            ["control failed", "verify:c2", "ran 0 times"],
        ),
        (
            dict(control_executions={f"verify:c{i}": 1 for i in range(7)}),
            ["control failed", "verify:c7", "ran 0 times"],
        ),
        (
            dict(control_executions={**{f"verify:c{i}": 1 for i in range(8)}, "verify:c4": 2}),
            ["control failed", "ran 2 times"],
        ),
        (
            dict(
                control_rows={
                    **{f"verify:c{i}": Row("committed", 1, "a") for i in range(8)},
                    "verify:c6": Row("ambiguous", 1, "a"),
                }
            ),
            ["control failed", "verify:c6", "ambiguous"],
        ),
        (
            dict(
                control_rows={
                    **{f"verify:c{i}": Row("committed", 1, "a") for i in range(8)},
                    "verify:c1": None,
                }
            ),
            ["control failed", "verify:c1", "missing"],
        ),
        # control leg: too few workers, or not 8 different keys
        (dict(control=g4_good()["control"][:7]), ["control failed", "expected 8"]),
        (
            dict(control=[replace(w, key="verify:c0") for w in g4_good()["control"]]),
            ["control failed", "on 1"],
        ),
        # a worker that crashed / timed out, in either leg
        (
            dict(control=_control_replaced(0, "crashed", "exit 1: ImportError")),
            ["control failed", "crashed", "ImportError"],
        ),
        (
            dict(control=_control_replaced(7, "timeout", "no report within 120 s")),
            ["control failed", "timeout"],
        ),
        (
            dict(contended=_contended(["committed"] + ["duplicate:in_progress"] * 6 + ["crashed"])),
            ["crashed", "worker 7"],
        ),
        (
            dict(contended=_contended(["committed"] + ["timeout"] + ["duplicate:committed"] * 6)),
            ["timeout", "worker 1"],
        ),
        (
            dict(contended=_contended(["committed"] + ["ambiguous"] + ["duplicate:committed"] * 6)),
            ["ambiguous"],
        ),
        (
            dict(contended=_contended(["committed"] + ["duplicate:committed"] * 6)),
            ["expected 8", "got 7"],
        ),
        # the row left on the contended key
        (dict(contended_row=None), ["missing"]),
        (dict(contended_row=Row("executing", 1, A1)), ["executing"]),
        (dict(contended_row=Row("ambiguous", 1, A1)), ["ambiguous"]),
        (dict(contended_row=Row("committed", 1, A2)), ["another action"]),
    ],
)
def test_judge_g4_fails(changes, needles):
    v = g4_with(**changes, action="x.y")
    assert v.status == "fail", v
    assert v.guarantee == "G4" and v.action == "x.y"
    for n in needles:
        assert n in v.reason, (n, v.reason)
    assert ": FAIL - " in v.line()


def test_judges_are_pure():
    """Judging twice gives the same verdict and does not mutate the inputs."""
    args = g4_good()
    snapshot = json.dumps({k: repr(v) for k, v in args.items()})
    assert judge_g4(**args) == judge_g4(**args)
    assert json.dumps({k: repr(v) for k, v in args.items()}) == snapshot
    assert judge_g3(**g3_good()) == judge_g3(**g3_good())


# --------------------------------------------------------------------------------------------
# the exit status
# --------------------------------------------------------------------------------------------

P3 = Verdict("G3", "pass", "ok")
P4 = Verdict("G4", "pass", "ok")
F3 = Verdict("G3", "fail", "the executor ran 2 times for one key")
F4 = Verdict("G4", "fail", "control failed")
N3 = Verdict("G3", "n/a", "no effect template: it runs unreserved", "audit.log")
N4 = Verdict("G4", "n/a", "no effect template: it runs unreserved", "audit.log")


@pytest.mark.parametrize(
    "verdicts,status",
    [
        ([P3, P4], 0),
        ([P3, P4, N3, N4], 0),
        ([N3, N4], 0),
        ([F3, P4], 1),
        ([P3, F4], 1),
        ([F3, F4], 1),
        ([N3, N4, F4], 1),
        ([P3, P4, N3, N4, F3], 1),
    ],
)
def test_report_exit_status(verdicts, status):
    assert _verify.report(verdicts) == status


def test_verdict_lines():
    assert (
        N3.line()
        == "G3 duplicate effect refused [audit.log]: N/A - no effect template: it runs unreserved"
    )
    assert F4.line() == "G4 one winner under concurrency: FAIL - control failed"

"""The judgement of ``ctrlrun soak``: a pure function of what the run recorded (outside the
store, and the rows it left), so it is tested on recorded outcomes.

* ``doubles``: keys whose body ran more than once, counted by the marks (one file per
  execution). Must be 0.
* ``lost``: calls the library told ``ok`` (they returned normally) whose key's row is not
  ``committed`` at the end. Must be 0.
* A run in which no call was told ``ok`` exercised nothing: it fails as a failed control,
  never passes.

The rest is reported, not judged: refusals (``DuplicateEffect``, ``AmbiguousEffect``: the
library doing its job), errors by exception class, keys left for a person (``ambiguous``, or
still held by a worker that was killed), calls per second, latency percentiles, kills, cuts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

__all__ = ["PREFIX", "NOT_ESTABLISHED", "Recorded", "Report", "judge", "percentile"]

PREFIX = "soak:"  # a soak's effect key is PREFIX + the key its files name (``g3-k1``)
NOT_ESTABLISHED = (
    "it cannot prove that a double never happens: it only failed to find one in this run, "
    "with these processes, keys and timings",
    "it does not exercise the remote side: the protected body here writes a line to a local "
    "file, not a call to your payment API, so your API's own idempotency, timeouts and retries are not "
    "tested",
)
SHOWN = 10  # keys named in a failure, at most


@dataclass(frozen=True)
class Recorded:
    """What one soak recorded. Keys are the soak's own (``g3-k1``), without the prefix."""

    seconds: float  # how long the workers ran
    attempted: int  # calls started
    ended: Mapping[str, int]  # outcome -> calls that ended so
    ok_keys: Sequence[str]  # the key of every call told ok, once per call
    latencies_ms: Sequence[float]  # of calls that ended (all outcomes)
    executions: Mapping[str, int]  # key -> executions the marks count
    rows: Mapping[str, str]  # key -> the state of its row at the end
    kills: int
    cuts: Optional[int] = None  # None: no --faults
    samples: Mapping[str, str] = field(default_factory=dict)  # error kind -> one message


@dataclass(frozen=True)
class Report:
    verdict: str  # "pass" | "fail"
    reasons: Tuple[str, ...]
    calls: int
    calls_per_s: float
    ok: int
    refused: Dict[str, int]
    errors: Dict[str, int]
    error_samples: Dict[str, str]
    cut_short: int
    doubles: int
    double_keys: List[str]
    lost: int
    lost_keys: List[str]
    left_for_a_person: int
    left_states: Dict[str, int]
    keys: int
    latency_ms: Dict[str, Optional[float]]
    kills: int
    cuts: Optional[int]

    def exit_status(self) -> int:
        """1 when a double or a lost call was found (or nothing was exercised), else 0."""
        return 0 if self.verdict == "pass" else 1

    def as_dict(self) -> Dict[str, Any]:
        out = dict(self.__dict__)
        out["reasons"] = list(self.reasons)
        out["does_not_establish"] = list(NOT_ESTABLISHED)
        return out

    def lines(self, about: str) -> List[str]:
        """The human report; ``about`` says what ran (backend, processes, seconds, faults)."""
        head = "PASS - no double, no lost call" if self.verdict == "pass" else "FAIL - "
        head += "; ".join(self.reasons)
        refused = ", ".join(f"{k} {v}" for k, v in sorted(self.refused.items())) or "none"
        errors = ", ".join(f"{k} {v}" for k, v in sorted(self.errors.items())) or "none"
        left = ", ".join(f"{k} {v}" for k, v in sorted(self.left_states.items()))
        lat = self.latency_ms
        latency = (
            "no call ended"
            if lat["p50"] is None
            else f"p50 {lat['p50']:.1f} ms, p95 {lat['p95']:.1f} ms, p99 {lat['p99']:.1f} ms"
        )
        out = [
            f"soak: {head} ({about})",
            f"  calls:             {self.calls} ({self.calls_per_s:.1f}/s), {self.ok} told ok, "
            f"{self.cut_short} cut short by a kill",
            f"  refused:           {sum(self.refused.values())} ({refused})",
            f"  errors:            {sum(self.errors.values())} ({errors})",
            f"  latency:           {latency}",
            f"  kills:             {self.kills}"
            + (" (none landed: run longer, --seconds 10 or more)" if self.kills == 0 else "")
            + ("" if self.cuts is None else f"; connections cut: {self.cuts}"),
            f"  doubles:           {self.doubles}"
            + (f" ({', '.join(self.double_keys)})" if self.double_keys else ""),
            f"  lost:              {self.lost}"
            + (f" ({', '.join(self.lost_keys)})" if self.lost_keys else ""),
            f"  left for a person: {self.left_for_a_person} of {self.keys} keys"
            + (f" ({left})" if left else ""),
            "What a soak does not establish:",
        ]
        return out + [f"  - {line}" for line in NOT_ESTABLISHED]


def percentile(sorted_values: Sequence[float], p: float) -> Optional[float]:
    """The nearest-rank ``p``-th percentile of values sorted ascending (``None`` for none)."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(p / 100.0 * len(sorted_values)))
    return round(float(sorted_values[rank - 1]), 3)


def judge(rec: Recorded) -> Report:
    """The verdict and the figures of one run."""
    doubles = sorted(k for k, n in rec.executions.items() if n > 1)
    lost = [k for k in rec.ok_keys if rec.rows.get(k) != "committed"]
    refused: Dict[str, int] = {}
    errors: Dict[str, int] = {}
    for outcome, n in rec.ended.items():
        kind, _, what = outcome.partition(":")
        if kind == "refused":
            refused[what] = refused.get(what, 0) + n
        elif kind == "error":
            errors[what] = errors.get(what, 0) + n
    ok = rec.ended.get("ok", 0)
    left: Dict[str, int] = {}
    for state in rec.rows.values():
        if state in ("ambiguous", "reserved", "executing"):
            left[state] = left.get(state, 0) + 1
    reasons: List[str] = []
    if doubles:
        shown = ", ".join(f"{k} ran {rec.executions[k]} times" for k in doubles[:SHOWN])
        reasons.append(f"{len(doubles)} key(s) ran more than once ({shown})")
    if lost:
        shown = ", ".join(f"{k} is {rec.rows.get(k, 'missing')}" for k in lost[:SHOWN])
        reasons.append(f"{len(lost)} call(s) told ok whose key is not committed ({shown})")
    lost_writes = errors.get("StoreLostWrite", 0)
    if lost_writes:
        # the store itself lost a write it had acknowledged: the promise broke under the soak
        reasons.append(f"{lost_writes} call(s) met a write the store had lost (StoreLostWrite)")
    if ok == 0:
        reasons.append("control failed: no call was told ok, so the run exercised nothing")

    lat = sorted(rec.latencies_ms)
    ended = sum(rec.ended.values())
    return Report(
        verdict="fail" if reasons else "pass",
        reasons=tuple(reasons),
        calls=rec.attempted,
        calls_per_s=round(rec.attempted / rec.seconds, 1) if rec.seconds > 0 else 0.0,
        ok=ok,
        refused=refused,
        errors=errors,
        error_samples={k: v for k, v in rec.samples.items() if k in errors},
        cut_short=max(0, rec.attempted - ended),
        doubles=len(doubles),
        double_keys=doubles[:SHOWN],
        lost=len(lost),
        lost_keys=sorted(set(lost))[:SHOWN],
        left_for_a_person=sum(left.values()),
        left_states=left,
        keys=len(rec.rows),
        latency_ms={f"p{p}": percentile(lat, p) for p in (50, 95, 99)},
        kills=rec.kills,
        cuts=rec.cuts,
    )

"""The benchmark's measurements by row, and the targets checked against them (for
``_report.report``)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    if a is None or b is None or b == 0:
        return None
    return a / b


class Measures:
    """The median run of each row of ``bench`` (run.py's ``Bench``, measured), and the targets
    recorded so far."""

    def __init__(self, bench: Any) -> None:
        self.by_id: Dict[Tuple[str, str], Any] = {(s.backend, s.id): s for s in bench.specs}
        self.targets: List[Dict[str, Any]] = []

    def med(self, backend: str, rid: str) -> Optional[Dict[str, Any]]:
        s = self.by_id.get((backend, rid))
        return s.median() if s else None

    def p50(self, backend: str, rid: str) -> Optional[float]:
        m = self.med(backend, rid)
        return None if m is None else m["p50_us"]

    def mean(self, backend: str, rid: str) -> Optional[float]:
        """Mean time per call in µs: the timed loop's wall time / calls."""
        m = self.med(backend, rid)
        return None if m is None or not m.get("per_s_wall") else 1e6 / m["per_s_wall"]

    def total(self, backend: str, rid: str) -> Optional[float]:
        m = self.med(backend, rid)
        return None if m is None else m["total_s"]

    def target(
        self,
        backend: str,
        name: str,
        value: Optional[float],
        goal: str,
        ok: Optional[bool],
        note: str = "",
    ) -> None:
        verdict = "n/a" if ok is None else ("MET" if ok else "MISSED")
        self.targets.append(
            {
                "backend": backend,
                "check": name,
                "measured": value,
                "goal": goal,
                "verdict": verdict,
                "note": note,
            }
        )

    def cpu(self, backend: str, rid: str) -> Optional[float]:
        m = self.med(backend, rid)
        return None if m is None else m["cpu_us_per_call"]

    def async_targets(
        self, backend: str, sfx: str, label: str, goal: str, limit: float, floors: Tuple[str, ...]
    ) -> None:
        """Issue 14: async p50 and client CPU against sync's, beside the same ratios for the
        floors awaited off the loop (_floor_async.py): the part of the target that keeping the
        store's I/O off the event loop takes by itself."""
        met = (lambda r: None if r is None else r <= limit) if goal != "info" else (lambda r: None)
        r = ratio(self.p50(backend, f"ctrlrun.async{sfx}"), self.p50(backend, f"ctrlrun.sync{sfx}"))
        self.target(backend, f"async p50 / sync p50{label}", r, goal, met(r))
        for f in floors:
            r = ratio(
                self.p50(backend, f"floor.{f}.async{sfx}"), self.p50(backend, f"floor.{f}{sfx}")
            )
            self.target(backend, f"  the same, floor {f}: async / sync{label}", r, "info", None)
        last = floors[-1]
        r = ratio(
            self.p50(backend, f"ctrlrun.async{sfx}"), self.p50(backend, f"floor.{last}.async{sfx}")
        )
        self.target(
            backend, f"  ctrlrun async p50 / floor {last} async p50{label}", r, "info", None
        )
        cpu_goal = "<= 1.5x" if goal != "info" else "info"
        r = ratio(self.cpu(backend, f"ctrlrun.async{sfx}"), self.cpu(backend, f"ctrlrun.sync{sfx}"))
        self.target(
            backend,
            f"async client CPU / sync client CPU{label}",
            r,
            cpu_goal,
            None if cpu_goal == "info" or r is None else r <= 1.5,
        )
        for f in floors:
            r = ratio(
                self.cpu(backend, f"floor.{f}.async{sfx}"), self.cpu(backend, f"floor.{f}{sfx}")
            )
            self.target(
                backend, f"  the same, floor {f}: async CPU / sync CPU{label}", r, "info", None
            )

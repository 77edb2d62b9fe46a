"""The benchmark's measurements by row, and the targets checked against them (for
``_report.report``)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return None if a is None or b is None or b == 0 else a / b


class Measures:
    """The median run of each row of ``bench`` (run.py's ``Bench``, measured), and the targets
    recorded so far."""

    def __init__(self, bench: Any) -> None:
        self.by_id: Dict[Tuple[str, str], Any] = {(s.backend, s.id): s for s in bench.specs}
        self.targets: List[Dict[str, Any]] = []

    def figure(self, backend: str, rid: str, name: str) -> Optional[float]:
        s = self.by_id.get((backend, rid))
        m = s.median() if s else None
        return None if m is None else m[name]

    def p50(self, backend: str, rid: str) -> Optional[float]:
        return self.figure(backend, rid, "p50_us")

    def mean(self, backend: str, rid: str) -> Optional[float]:
        """Mean time per call in µs: the timed loop's wall time / calls."""
        per_s = self.figure(backend, rid, "per_s_wall")
        return 1e6 / per_s if per_s else None

    def total(self, backend: str, rid: str) -> Optional[float]:
        return self.figure(backend, rid, "total_s")

    def cpu(self, backend: str, rid: str) -> Optional[float]:
        return self.figure(backend, rid, "cpu_us_per_call")

    def target(
        self, backend: str, name: str, value: Any, goal: str, ok: Any, note: str = ""
    ) -> None:
        """A target's row (``ok``: whether it is met, ``None``: no verdict)."""
        verdict = "n/a" if ok is None else ("MET" if ok else "MISSED")
        row = {"backend": backend, "check": name, "measured": value, "goal": goal}
        self.targets.append({**row, "verdict": verdict, "note": note})

    def check(
        self, backend: str, name: str, a: Optional[float], b: Optional[float], goal: str = "info"
    ) -> None:
        """The target ``a / b`` against ``goal`` (``<= 1.5x``, ``>= 10x``, or ``info``)."""
        r, ok = ratio(a, b), None
        if goal != "info" and r is not None:
            op, limit = goal.split()
            ok = r <= float(limit[:-1]) if op == "<=" else r >= float(limit[:-1])
        self.target(backend, name, r, goal, ok)

    def figure_of(self, backend: str, spec: str) -> Optional[float]:
        """``p50 ROW``, ``mean ROW`` or ``total ROW`` (``ROW@BACKEND``: another backend's row)."""
        fig, rid = spec.split()
        rid, _, other = rid.partition("@")
        return getattr(self, fig)(other or backend, rid)

    def checks(self, backend: str, text: str) -> None:
        """Every target of ``text``, one a line: ``check | figure | divided by | goal``, or
        ``async | row suffix | label | goal | floors`` (see ``_report.TARGETS``)."""
        for line in text.strip().splitlines():
            f = [x.strip() for x in line.split("|")]
            if f[0] == "async":
                self.async_targets(backend, f[1], f[2], f[3], tuple(f[4].split()))
            else:
                a, b = self.figure_of(backend, f[1]), self.figure_of(backend, f[2])
                self.check(backend, f[0], a, b, f[3])

    def async_targets(
        self, backend: str, sfx: str, label: str, goal: str, floors: Tuple[str, ...]
    ) -> None:
        """Issue 14: async p50 and client CPU against sync's, beside the same ratios for the
        floors awaited off the loop: the part of the target that keeping the store's I/O off
        the event loop takes by itself."""
        p50, cpu = (lambda rid: self.p50(backend, rid)), (lambda rid: self.cpu(backend, rid))
        check = lambda name, a, b, goal="info": self.check(backend, name + label, a, b, goal)  # noqa: E731
        check("async p50 / sync p50", p50(f"ctrlrun.async{sfx}"), p50(f"ctrlrun.sync{sfx}"), goal)
        for f in floors:
            check(
                f"  the same, floor {f}: async / sync",
                p50(f"floor.{f}.async{sfx}"),
                p50(f"floor.{f}{sfx}"),
            )
        last = floors[-1]
        check(
            f"  ctrlrun async p50 / floor {last} async p50",
            p50(f"ctrlrun.async{sfx}"),
            p50(f"floor.{last}.async{sfx}"),
        )
        cpu_goal = "<= 1.5x" if goal != "info" else "info"
        check(
            "async client CPU / sync client CPU",
            cpu(f"ctrlrun.async{sfx}"),
            cpu(f"ctrlrun.sync{sfx}"),
            cpu_goal,
        )
        for f in floors:
            check(
                f"  the same, floor {f}: async CPU / sync CPU",
                cpu(f"floor.{f}.async{sfx}"),
                cpu(f"floor.{f}{sfx}"),
            )

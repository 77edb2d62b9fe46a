"""What an attempt's ending records, and the one rule that decides it: only proof that nothing
happened (``NotExecuted``, or a call the gateway proved it never sent) records ``failed``, which
lets a retry run; any other exception leaves the effect ``ambiguous``; a return is ``committed``.

The decorator's sync and async drivers, the gateway and telemetry all ask this module."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import ctrlrun._core as _core
from ctrlrun.errors import NotExecuted
from ctrlrun.store.records import result_to_json

__all__ = ["Outcome", "proves_not_executed", "state_after", "returned", "raised", "exc_text"]

_WORDS = {
    _core.Step.COMMIT: ("commit", "committed"),
    _core.Step.FAIL: ("fail", "failed"),
    _core.Step.AMBIGUOUS: ("ambiguous", "ambiguous"),
}


@dataclass(frozen=True)
class Outcome:
    """The transition an ending records (``step``) with its payload: the result as JSON text
    (``COMMIT``) or why (``FAIL``, ``AMBIGUOUS``)."""

    step: _core.Step
    payload: Optional[str]

    @property
    def word(self) -> str:
        """How messages and logs name the write: ``commit``, ``fail`` or ``ambiguous``."""
        return _WORDS[self.step][0]

    @property
    def state(self) -> str:
        """The state it writes: ``committed``, ``failed`` or ``ambiguous``."""
        return _WORDS[self.step][1]


def proves_not_executed(exc: BaseException) -> bool:
    """The rule: only ``NotExecuted`` proves that nothing happened."""
    return isinstance(exc, NotExecuted)


def state_after(exc: BaseException) -> str:
    """The state an executor's exception leaves: ``failed`` or ``ambiguous``."""
    return "failed" if proves_not_executed(exc) else "ambiguous"


def exc_text(exc: BaseException) -> str:
    """``Type: message`` for the record: never raises, and storable as text anywhere (lone
    surrogates escaped, NUL shown as \\x00)."""
    try:
        msg = str(exc)
    except Exception:
        msg = "<str() of the exception raised>"
    text = f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


def returned(result: Any, encoder: Optional[Callable[[Any], Any]] = None) -> Outcome:
    """A return: ``committed`` with the value as JSON."""
    return Outcome(_core.Step.COMMIT, result_to_json(result, encoder))


def raised(exc: BaseException) -> Outcome:
    """An executor's exception: ``failed`` when it proves nothing happened, else
    ``ambiguous``."""
    text = exc_text(exc)
    if proves_not_executed(exc):
        return Outcome(_core.Step.FAIL, text)
    return Outcome(
        _core.Step.AMBIGUOUS, f"the executor raised {text}; whether the effect happened is unknown"
    )

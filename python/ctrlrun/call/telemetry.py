"""OpenTelemetry for protected calls and gateway calls, when ``opentelemetry-api`` is installed
(no hard dependency): one span per call, a call counter and a duration histogram, and a log
line on the ``ctrlrun`` logger (DEBUG per call, INFO per refusal).

The span follows the GenAI conventions for tool calls: ``execute_tool {action}``, kind
INTERNAL, ``gen_ai.operation.name=execute_tool``, ``gen_ai.tool.name``, ``error.type`` on
failure; ctrlrun adds ``ctrlrun.outcome``, ``ctrlrun.attempt`` and the effect key as its
SHA-256 digest (``ctrlrun.effect_key.sha256``): the conventions say instrumentations must not
export raw idempotency keys. ``CTRLRUN_OTEL_EFFECT_KEY=raw`` opts in to the raw key
(``ctrlrun.effect_key``).

With the API installed but no SDK configured, the spans are non-recording and nothing is
computed for them."""

from __future__ import annotations

import contextvars
import hashlib
import logging
import os
import time
from types import TracebackType
from typing import Any, Optional, Type

from ctrlrun.call.outcome import state_after
from ctrlrun.errors import (
    ActionDenied,
    AmbiguousEffect,
    ApprovalRequired,
    DuplicateEffect,
    EffectConflict,
)

log = logging.getLogger("ctrlrun")

try:
    from opentelemetry import metrics as _metrics
    from opentelemetry import trace as _trace
except ImportError:  # the API is optional
    _trace = None  # type: ignore[assignment]
    _metrics = None  # type: ignore[assignment]
try:
    from opentelemetry.metrics import _internal as _metrics_internal
except ImportError:
    _metrics_internal = None  # type: ignore[assignment]

if _trace is not None and _metrics is not None:
    import ctrlrun._core as _core

    _tracer: Any = _trace.get_tracer("ctrlrun", _core.__version__)
    _meter: Any = _metrics.get_meter("ctrlrun", _core.__version__)
    _calls: Any = _meter.create_counter(
        "ctrlrun.calls", unit="{call}", description="Protected and gateway calls, by outcome"
    )
    _duration: Any = _meter.create_histogram(
        "ctrlrun.call.duration",
        unit="s",
        description="Time of a protected or gateway call, from reservation to outcome",
    )
    _INTERNAL: Any = _trace.SpanKind.INTERNAL
else:
    _tracer = None


def _configured() -> bool:
    """Whether an SDK is in place (a tracer or meter provider set): without one, the call
    makes no span and records nothing, so the API being installed costs next to nothing.
    The API's own getters cost microseconds per call (they look at the environment each
    time), so the globals they fill are read where this API version has them."""
    tracer_set = getattr(_trace, "_TRACER_PROVIDER", _UNKNOWN)
    meter_set = getattr(_metrics_internal, "_METER_PROVIDER", _UNKNOWN)
    if tracer_set is not _UNKNOWN and meter_set is not _UNKNOWN:
        return tracer_set is not None or meter_set is not None
    return not (
        isinstance(_trace.get_tracer_provider(), _trace.ProxyTracerProvider)
        and type(_metrics.get_meter_provider()).__name__ == "_ProxyMeterProvider"
    )


_UNKNOWN = object()


# The call being observed in this context (the runner marks when its body starts).
_current: contextvars.ContextVar[Optional[Observation]] = contextvars.ContextVar(
    "ctrlrun_observation", default=None
)


def body_started(attempt: int) -> None:
    """The runner's mark: the observed call's body starts, as ``attempt``."""
    obs = _current.get()
    if obs is not None:
        obs.attempt = attempt
        obs.ran = True


def _outcome(obs: Observation, exc: Optional[BaseException]) -> str:
    if exc is None:
        return "refused_committed" if obs.replayed else "committed"
    if obs.ran:  # the body ran: what it raised decided the record
        return state_after(exc)
    if isinstance(exc, EffectConflict):
        return "conflict"
    if isinstance(exc, DuplicateEffect):
        return "refused_in_progress" if exc.state == "in_progress" else "refused_committed"
    if isinstance(exc, AmbiguousEffect):
        return "refused_ambiguous"
    if isinstance(exc, ActionDenied):
        return "denied"
    if isinstance(exc, ApprovalRequired):
        return "approval_required"
    return "error"


class Observation:
    """One observed call: ``with observe(action, key) as obs:`` around it; the caller sets
    ``obs.replayed`` when a refusal was answered with the stored result."""

    __slots__ = ("action", "attempt", "key", "ran", "replayed", "span", "started", "token")

    def __init__(self, action: str, key: str) -> None:
        self.action = action
        self.key = key
        self.attempt: Optional[int] = None
        self.ran = False
        self.replayed = False
        self.span: Any = None

    def __enter__(self) -> Observation:
        self.started = time.perf_counter()
        if _tracer is not None and _configured():
            self.span = _tracer.start_span(f"execute_tool {self.action}", kind=_INTERNAL)
        self.token = _current.set(self)
        return self

    def __exit__(
        self,
        kind: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        _current.reset(self.token)
        outcome = _outcome(self, exc)
        if log.isEnabledFor(logging.INFO):
            if outcome.startswith("refused") or outcome in (
                "conflict",
                "denied",
                "approval_required",
            ):
                log.info("ctrlrun: %s %s: %s", self.action, self.key, outcome)
            else:
                log.debug(
                    "ctrlrun: %s %s: %s (attempt %s)", self.action, self.key, outcome, self.attempt
                )
        if self.span is None:
            return
        seconds = time.perf_counter() - self.started
        labels = {"gen_ai.tool.name": self.action, "ctrlrun.outcome": outcome}
        _calls.add(1, labels)
        _duration.record(seconds, labels)
        span = self.span
        if span.is_recording():
            span.set_attribute("gen_ai.operation.name", "execute_tool")
            span.set_attribute("gen_ai.tool.name", self.action)
            span.set_attribute("ctrlrun.outcome", outcome)
            if self.attempt is not None:
                span.set_attribute("ctrlrun.attempt", self.attempt)
            if os.environ.get("CTRLRUN_OTEL_EFFECT_KEY") == "raw":
                span.set_attribute("ctrlrun.effect_key", self.key)
            else:
                digest = hashlib.sha256(self.key.encode("utf-8", "surrogatepass")).hexdigest()
                span.set_attribute("ctrlrun.effect_key.sha256", digest)
            if exc is not None:
                span.set_attribute("error.type", type(exc).__qualname__)
                span.set_status(_trace.Status(_trace.StatusCode.ERROR))
        span.end()


class Unobserved:
    """Stands in for an :class:`Observation` when nobody looks: records nothing."""

    __slots__ = ("replayed",)
    replayed: bool

    def __enter__(self) -> Unobserved:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


UNOBSERVED = Unobserved()


def observe(action: str, key: str) -> Optional[Observation]:
    """An :class:`Observation` of one call (``with observe(...) as seen:`` around it), or
    ``None`` when there is no SDK and INFO logging is off: then the caller skips it, and the
    protected call's hot path pays about a microsecond for asking."""
    if _FAST:
        if (
            _trace._TRACER_PROVIDER is None
            and _metrics_internal._METER_PROVIDER is None
            and not log.isEnabledFor(logging.INFO)
        ):
            return None
        return Observation(action, key)
    if (_tracer is not None and _configured()) or log.isEnabledFor(logging.INFO):
        return Observation(action, key)
    return None


# The API's globals can be read directly (see _configured), or there is no API at all.
_FAST = (
    _tracer is not None
    and hasattr(_trace, "_TRACER_PROVIDER")
    and hasattr(_metrics_internal, "_METER_PROVIDER")
)

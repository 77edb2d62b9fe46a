"""The steps of a protected call, synchronous: reserve (straight into ``executing``), run
the executor, record its outcome. The async driver (``_runner_async``) runs the same steps."""

from __future__ import annotations

import contextvars
import hashlib
import logging
import os
import time
from typing import Any, Callable, Optional, Tuple

from ._records import result_to_json
from ._store import Store
from .errors import (
    AmbiguousEffect,
    DuplicateEffect,
    InvalidArgument,
    NotExecuted,
    StoreError,
    StoreUnresolved,
    StoreWriteFailed,
)

log = logging.getLogger("ctrlrun")

# (effect key, attempt) of the executor running in this context.
current: contextvars.ContextVar[Optional[Tuple[str, int]]] = contextvars.ContextVar(
    "ctrlruncurrent_effect", default=None
)

# Outcome writes are compare-and-sets, so re-issuing them is safe: this many tries, these pauses.
OUTCOME_PAUSES = (0.05, 0.25, 1.0)


def idempotency_token() -> str:
    """A token for the remote API's own idempotency header, derived from the running
    executor's (effect key, attempt): the same on every call within one attempt, different
    after a renewal. Raises ``InvalidArgument`` outside a protected executor."""
    cur = current.get()
    if cur is None:
        raise InvalidArgument("idempotency_token() is only available inside a protected executor")
    key, attempt = cur
    digest = hashlib.sha256(f"{attempt}\x1f{key}".encode("utf-8", "surrogatepass")).hexdigest()
    return f"ctrlrun-{digest[:40]}"


def exc_text(exc: BaseException) -> str:
    """``Type: message`` for the record: never raises, and storable as text anywhere (lone
    surrogates escaped, NUL shown as \\x00)."""
    try:
        msg = str(exc)
    except Exception:
        msg = "<str() of the exception raised>"
    text = f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


def new_action_id() -> str:
    return "act_" + os.urandom(16).hex()


def outcome_of_raise(exc: BaseException) -> Tuple[str, str]:
    """The outcome an executor's exception records: ``NotExecuted`` says nothing happened
    (``failed``: a retry may run); anything else leaves it unknown (``ambiguous``)."""
    if isinstance(exc, NotExecuted):
        return "fail", exc_text(exc)
    return "ambiguous", f"the executor raised {exc_text(exc)}; whether the effect happened is unknown"


def write_outcome(
    store: Store, key: str, action_id: str, attempt: int, kind: str, payload: Optional[str]
) -> None:
    """Record the executor's outcome, re-issuing the compare-and-set on store failures."""
    core = store.core
    last: Optional[Exception] = None
    for pause in (*OUTCOME_PAUSES, None):
        try:
            core.transition_unread(key, action_id, attempt, kind, payload, store.now_us())
            return
        except (StoreWriteFailed, StoreUnresolved) as exc:
            last = exc
            log.warning("ctrlrun: recording %s for %r failed (%s); retrying", kind, key, exc)
            if pause is not None:
                time.sleep(pause)
        except (DuplicateEffect, AmbiguousEffect):
            raise  # the row was taken over: the store's refusal is the answer
        except Exception as exc:  # a closed store, a broken clock: not worth retrying
            last = exc
            break
    raise StoreError(
        f"the executor for effect '{key}' has already run (attempt {attempt}, action "
        f"{action_id}), but recording its outcome ({kind}) failed: {last}. The effect stays executing and turns ambiguous when a contender "
        f"meets its lapsed lease; do not retry it blindly"
    ) from last


def fail_unstarted(store: Store, key: str, action_id: str, attempt: int, why: BaseException) -> None:
    """The call stopped after the reservation landed but before the body began: nothing ran,
    so record ``failed`` (a retry may run). If that write fails too, the lease lapses into
    ``ambiguous``."""
    try:
        store.core.transition(
            key,
            action_id,
            attempt,
            "fail",
            f"the executor never started: {exc_text(why)}",
            store.now_us(),
        )
    except Exception as exc:  # the original error is what the caller must see
        log.warning("ctrlrun: could not record %r as failed after %r: %s", key, why, exc)


def reserve_and_begin(store: Store, key: str, action_id: str, lease_us: int) -> int:
    """Reserve ``key`` straight into ``executing`` (one durable write: the begin transition is
    folded into the reservation, since the body starts right after); returns the attempt."""
    core = store.core
    attempt: Optional[int] = None
    try:
        attempt = core.reserve(key, action_id, lease_us, store.now_us(), True)[3]
        # Still inside the try: an interrupt (KeyboardInterrupt) landing just after the
        # reservation returned records it as failed, since the body never started.
        return attempt
    except BaseException as exc:
        if attempt is not None:
            fail_unstarted(store, key, action_id, attempt, exc)
        raise


def run(
    store: Store,
    key: str,
    lease_us: int,
    fn: Callable[..., Any],
    args: Tuple[Any, ...],
    kwargs: dict,
) -> Any:
    action_id = new_action_id()
    attempt = reserve_and_begin(store, key, action_id, lease_us)
    token = current.set((key, attempt))
    try:
        result = fn(*args, **kwargs)
    except BaseException as exc:
        kind, text = outcome_of_raise(exc)
        outcome_after_raise(store, key, action_id, attempt, kind, text, exc)
        raise
    finally:
        current.reset(token)
    write_outcome(store, key, action_id, attempt, "commit", result_to_json(result))
    return result


def outcome_after_raise(
    store: Store, key: str, action_id: str, attempt: int, kind: str, text: str, exc: BaseException
) -> None:
    try:
        write_outcome(store, key, action_id, attempt, kind, text)
    except (StoreError, DuplicateEffect, AmbiguousEffect, InvalidArgument) as refusal:
        raise refusal from exc

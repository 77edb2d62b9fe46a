"""The arguments of a listing, checked once for effects and approval requests: a page's cursor
(``record.cursor``, the row's position in the order), a limit, a set of approval states, and
the core's query for approval requests."""

from __future__ import annotations

from typing import Any, Iterable, List, Optional, Tuple, Union

import ctrlrun._core as _core
from ctrlrun.errors import InvalidArgument
from ctrlrun.store.approvals import ApprovalState

__all__ = ["after_of", "limit_of", "approval_query", "MAX_COUNT", "ApprovalStates"]

#: The most requests ``Store.count_approvals`` counts unless told otherwise.
MAX_COUNT = 10_000
_MAX_INT = 2**63 - 1

ApprovalStates = Union[ApprovalState, str, Iterable[Union[ApprovalState, str]], None]


def after_of(cursor: Optional[str]) -> Optional[Tuple[int, str]]:
    """A cursor (``record.cursor``) as ``(microseconds, key)``; ``None`` for none."""
    if cursor is None:
        return None
    at, sep, key = cursor.partition(":") if isinstance(cursor, str) else ("", "", "")
    digits = at[1:] if at.startswith("-") else at
    if not sep or not key or not digits.isascii() or not digits.isdigit() or len(digits) > 19:
        raise InvalidArgument(
            f"after must be the cursor of a listed record (record.cursor), got {cursor!r}"
        )
    micros = int(at)
    if not -_MAX_INT <= micros <= _MAX_INT:
        raise InvalidArgument(f"after: the cursor's time is out of range in {cursor!r}")
    return micros, key


def limit_of(limit: Any, what: str = "limit") -> Optional[int]:
    """``limit``, refused unless ``None`` or a positive integer."""
    if limit is not None and (
        isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= _MAX_INT
    ):
        raise InvalidArgument(f"{what} must be a positive integer, got {limit!r}")
    return limit


def _states(state: ApprovalStates) -> List[Any]:
    """The states named, checked (an empty list: every state)."""
    if state is None:
        return []
    if isinstance(state, str):  # an ApprovalState is a str too
        state = [state]
    try:
        named = [s.value if isinstance(s, ApprovalState) else s for s in state]
    except TypeError:
        raise InvalidArgument(f"state must be a state or a list of states, got {state!r}") from None
    known = [s.value for s in ApprovalState]
    for s in named:
        if not isinstance(s, str) or s not in known:
            raise InvalidArgument(f"state: {s!r} is not one of {', '.join(known)}")
    if not named:
        raise InvalidArgument(f"state is empty: name one or more of {', '.join(known)}")
    return list(dict.fromkeys(named))


def approval_query(
    state: ApprovalStates = None,
    action: Optional[str] = None,
    prefix: Optional[str] = None,
    requested_by: Optional[str] = None,
    after: Optional[str] = None,
    newest_first: bool = False,
    limit: Optional[int] = None,
) -> _core.ApprovalQuery:
    """The core's query for ``Store.list_approvals`` and ``count_approvals``, checked."""
    if not isinstance(newest_first, bool):
        raise InvalidArgument(f"newest_first must be True or False, got {newest_first!r}")
    return _core.ApprovalQuery(
        _states(state), action, prefix, requested_by, after_of(after), newest_first, limit_of(limit)
    )

"""What a protected function says about itself to an integration (``wrapper.__ctrlrun__``):
its action, the options it was protected with, its store, and the approval request standing
for a call's arguments, asked without reserving or running anything. A framework's own
human-in-the-loop uses it to decide whether to pause a run before the tool is called."""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

from ctrlrun.call import io_threads
from ctrlrun.call.binding import Gate, Route
from ctrlrun.call.steps import Call, Spec
from ctrlrun.store.api import Store
from ctrlrun.store.approvals import ApprovalRecord

__all__ = ["Protected", "protected"]


class Protected:
    """``action``: the action's name; ``options``: the keyword arguments given to
    ``protect()`` (to protect another function the same way)."""

    __slots__ = ("_astore", "_bound", "_gate", "_lease_us", "_store", "action", "options")

    def __init__(
        self,
        action: str,
        options: Dict[str, Any],
        gate: Gate,
        bound: Callable[[Route, Any, Any], Tuple[str, Spec]],
        lease_us: int,
        store: Callable[[], Store],
        astore: Callable[[], Any],
    ) -> None:
        self.action = action
        self.options = options
        self._gate = gate
        self._bound = bound
        self._lease_us = lease_us
        self._store = store
        self._astore = astore

    def store(self) -> Store:
        """The store this function's calls use (opened on first use)."""
        return self._store()

    async def astore(self) -> Store:
        """:meth:`store` without blocking the event loop."""
        store: Store = await self._astore()
        return store

    def key(self, *args: Any, **kwargs: Any) -> Optional[str]:
        """The effect key these arguments reserve; ``None`` when the call runs unreserved."""
        route = self._gate.route()
        return None if route is None else route[0].key(args, kwargs)

    def _call(self, store: Store, args: Any, kwargs: Any) -> Optional[Call]:
        route = self._gate.route()  # a decision 'deny' raises ActionDenied here
        if route is None or route[1] is None:
            return None
        key, spec = self._bound(route, args, kwargs)
        return Call(store, key, self._lease_us, spec)

    def approval(self, *args: Any, **kwargs: Any) -> Optional[ApprovalRecord]:
        """``None`` when a call with these arguments needs no person's approval; else the
        request standing for them (pending, granted or denied), asked (written pending) when
        none stands. Store I/O; nothing is reserved or run."""
        call = self._call(self.store(), args, kwargs)
        return None if call is None else call.ask()

    async def aapproval(self, *args: Any, **kwargs: Any) -> Optional[ApprovalRecord]:
        """:meth:`approval`, its store I/O on a worker thread."""
        call = self._call(await self.astore(), args, kwargs)
        return None if call is None else await io_threads.run(call.ask)


def protected(fn: Any) -> Optional[Protected]:
    """The :class:`Protected` of ``fn`` or of a function it wraps (``__wrapped__``)."""
    seen = 0
    while fn is not None and seen < 100:
        found = getattr(fn, "__ctrlrun__", None)
        if isinstance(found, Protected):
            return found
        fn = getattr(fn, "__wrapped__", None)
        seen += 1
    return None

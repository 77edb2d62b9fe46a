"""A store's policy (``ctrlrun policy apply``, docs/roles.md): each action's rule, kept in the
store, a floor under every caller's own policy. A reservation of an action the store says needs
approval is refused without a grant in force, whatever the caller's policy says; a request
needs the larger of the caller's and the store's number of approvers; a denied action never
runs. On PostgreSQL the server enforces it (only the owner's role may change it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, List

import ctrlrun._core as _core
from ctrlrun.errors import InvalidArgument

__all__ = ["ActionRule", "PolicyMethods"]


@dataclass(frozen=True)
class ActionRule:
    """One action's rule in a store's policy.

    Attributes:
        action: the action's name (``stripe.refund``).
        decision: ``allow``, ``approve`` or ``deny``.
        approvals: how many distinct people must grant a call (``approve``; 1 to 10).
    """

    action: str
    decision: str
    approvals: int = 1


class PolicyMethods:
    """The store-policy methods of :class:`ctrlrun.Store`."""

    __slots__ = ()
    _core: _core.Store

    def policy(self) -> List[ActionRule]:
        """Every action's rule in the store's policy, by name."""
        return [ActionRule(*r) for r in self._core.policy()]

    def apply_policy(self, rules: Iterable[ActionRule]) -> None:
        """Make ``rules`` the store's whole policy, in one transaction (an action left out has
        no rule afterwards). On PostgreSQL, only the role that owns the store's tables may."""
        # A str or a mapping iterates as something else (characters, keys): refused, never
        # read as an empty policy that would clear the store's.
        if isinstance(rules, (str, bytes, dict)) or not hasattr(rules, "__iter__"):
            raise InvalidArgument(
                f"apply_policy takes a list of ActionRule, got {type(rules).__name__}; "
                "nothing was written"
            )
        rules = list(rules)
        for r in rules:
            if not isinstance(r, ActionRule):
                raise InvalidArgument(
                    f"apply_policy takes ActionRule items, got {type(r).__name__}; "
                    "nothing was written"
                )
        self._core.apply_policy([(r.action, r.decision, r.approvals) for r in rules])

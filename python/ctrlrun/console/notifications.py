"""Starting the notification watcher (``ctrlrun.notify.watcher``) beside the console when the
policy configures notifications: the time-based events (expiry, escalation, a lease that
lapsed) come from it."""

from __future__ import annotations

from typing import Optional

from ctrlrun.notify import hooks
from ctrlrun.notify.watcher import Watcher, start_watcher
from ctrlrun.policy import Policy, current_policy
from ctrlrun.store.api import Store

__all__ = ["start_notifications"]


def _configured(policy: Optional[Policy]) -> bool:
    if policy is None:
        return False
    return bool(policy.notify) or any(a.notify for a in policy.actions.values())


def start_notifications(store: Store, given_url: Optional[str], serving: str) -> Optional[Watcher]:
    """The watcher started (its ``stop()`` ends it), or ``None`` when the policy configures no
    notification. Its links use ``--console-url`` (``given_url``), else the policy's
    ``console_url``, else the address the console serves (``serving``)."""
    policy = current_policy()
    if not _configured(policy):
        return None
    assert policy is not None
    url = given_url or policy.console_url or serving
    hooks.serve_links_from(url)  # the decisions made here link to this console too
    return start_watcher(store, console_url=url)

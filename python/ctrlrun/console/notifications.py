"""Starting the notification watcher (``ctrlrun.notify.watcher``) beside the console, when the
policy configures notifications: the time-based events (expiry, escalation, a lease that
lapsed) come from it."""

from __future__ import annotations

import importlib
import logging
from typing import Any, Optional

from ctrlrun.store.api import Store

__all__ = ["start_notifications"]

log = logging.getLogger("ctrlrun.console")


def _configured(policy: Any) -> bool:
    if policy is None:
        return False
    if getattr(policy, "notify", None):
        return True
    return any(getattr(a, "notify", None) for a in getattr(policy, "actions", {}).values())


def start_notifications(store: Store, console_url: Optional[str]) -> Optional[Any]:
    """The watcher started (its ``stop()`` ends it), or ``None`` when the policy configures no
    notification (or this build has no watcher)."""
    from ctrlrun._policy import current_policy

    if not _configured(current_policy()):
        return None
    try:
        watcher = importlib.import_module("ctrlrun.notify.watcher")
    except ImportError:
        log.warning("console: the policy configures notifications, but this ctrlrun has no watcher")
        return None
    return watcher.start_watcher(store, console_url=console_url)

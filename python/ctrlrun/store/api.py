"""The store in one import: :class:`Store` and :func:`open_store` (``facade.py``), and the
default store (``default.py``)."""

from ctrlrun.store.default import (
    DEFAULT_STATE_PATH,
    default_store,
    default_url,
    set_default_store,
    store_at_hand,
    store_for_url,
    use_when_default_is_unset,
)
from ctrlrun.store.facade import Clock, Store, open_store

__all__ = [
    "Store",
    "open_store",
    "default_store",
    "set_default_store",
    "DEFAULT_STATE_PATH",
    "Clock",
    "default_url",
    "store_at_hand",
    "store_for_url",
    "use_when_default_is_unset",
]

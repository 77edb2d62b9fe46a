"""The policy file (``ctrlrun.yaml``): effect templates and decisions for actions that have no
decorator to carry them. ``file.py`` parses and caches it, ``notify.py`` reads its
notification keys, ``nodes.py`` its YAML nodes. (The policy kept in a store, which
``ctrlrun policy apply`` writes, is :mod:`ctrlrun.store.policy`.)"""

from ctrlrun.policy.file import (
    DEFAULT_FILE,
    SCHEMA,
    ActionPolicy,
    Policy,
    current_policy,
    load_policy,
    policy_path,
)

__all__ = [
    "Policy",
    "ActionPolicy",
    "load_policy",
    "current_policy",
    "policy_path",
    "SCHEMA",
    "DEFAULT_FILE",
]

"""The policy file: effect templates and decisions for actions that have no decorator to
carry them (tools called through a gateway).

::

    schema: ctrlrun.policy/v2
    actions:
      stripe.refund:
        effect: "refund:{payment_id}"
        decision: allow          # allow (default) | approve | deny
        approval_ttl: 15m        # approve only: how long a request waits and a grant lasts
        on_tool_error: ambiguous # gateway: what an upstream tool error means (or failed)
        call_timeout: 30s        # gateway: how long a forwarded call may take
        replay: true             # a committed duplicate gets the stored result (same arguments)
        approvals: 2             # approve only: distinct people who must grant (1..10)
        escalate_after: 10m      # approve only: pending this long notifies again (once)
        notify: []               # this action's webhooks, in place of the global list
    console_url: https://ctrlrun.example.com:8780   # the links in notifications
    notify:                      # webhooks told of approvals and ambiguous effects
      - {url_env: SLACK_WEBHOOK_URL, format: slack}
      - {url: https://hooks.example.com/ctrlrun, format: json, secret_env: HOOK_SECRET}
    escalate_after: 30m

Found at ``CTRLRUN_CONFIG``, else ``ctrlrun.yaml`` in the working directory; no file means no
policy. Parsed with PyYAML; every error is a :class:`~ctrlrun.PolicyError` naming the file, the
line and the field.
"""

from __future__ import annotations

import os
import stat
import threading
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Dict, List, Optional, Tuple

import yaml

import ctrlrun._core as _core
from ctrlrun.errors import InvalidArgument, PolicyError
from ctrlrun.policy.nodes import absent, integer
from ctrlrun.policy.nodes import duration as _duration
from ctrlrun.policy.nodes import fail as _fail
from ctrlrun.policy.nodes import mapping as _mapping
from ctrlrun.policy.nodes import scalar as _scalar
from ctrlrun.policy.notify import NotifyTarget, parse_console_url, parse_targets

__all__ = ["Policy", "ActionPolicy", "load_policy", "current_policy", "SCHEMA", "DEFAULT_FILE"]

SCHEMA = "ctrlrun.policy/v2"
DEFAULT_FILE = "ctrlrun.yaml"
DECISIONS = ("allow", "approve", "deny")
#: The most distinct approvers ``approvals: N`` may ask for.
MAX_APPROVALS = 10


@dataclass(frozen=True)
class ActionPolicy:
    """One action's entry: its effect template (or ``None``: runs unreserved) and decision."""

    name: str
    effect: Optional[str]
    decision: str
    line: int
    #: ``approval_ttl`` (``approve`` only), or ``None``: the default (15 minutes).
    approval_ttl: Optional[timedelta] = None
    #: Whether the entry states a ``decision`` (else ``allow`` is assumed, and a decorator's
    #: own decision stays in force).
    decided: bool = False
    #: Gateway: what an upstream tool error means: ``ambiguous`` (default: an error does not
    #: prove the effect did not happen) or ``failed`` (this upstream's errors mean nothing was
    #: done, so a retry may run).
    on_tool_error: str = "ambiguous"
    #: Gateway: how long a forwarded call may take (``None``: the gateway's ``--call-timeout``).
    call_timeout: Optional[timedelta] = None
    #: A committed duplicate with the same arguments gets the stored result instead of a
    #: refusal (``None``: not stated; a decorator's own ``replay=`` stays in force).
    replay: Optional[bool] = None
    #: ``approvals: N`` (``approve`` only): how many distinct people must grant a request
    #: (``None``: not stated, one).
    approvals: Optional[int] = None
    #: This action's own ``notify`` list, which replaces the global one (``None``: not stated,
    #: the global list applies; ``()``: no notifications for this action).
    notify: Optional[Tuple[NotifyTarget, ...]] = None
    #: ``escalate_after`` (``approve`` only; ``None``: the global one, if any).
    escalate_after: Optional[timedelta] = None


@dataclass(frozen=True)
class Policy:
    path: str
    actions: Dict[str, ActionPolicy] = field(default_factory=dict)
    #: ``console_url``: the console's address, for the links in notifications.
    console_url: Optional[str] = None
    #: The global ``notify`` list (an action's own list replaces it).
    notify: Tuple[NotifyTarget, ...] = ()
    #: The global ``escalate_after``: a request pending longer notifies again (once).
    escalate_after: Optional[timedelta] = None
    #: Whether any ``notify`` list names a target: the one check an event makes when none does.
    notifies: bool = False

    def unreserved(self) -> List[ActionPolicy]:
        """Allowed actions with no effect template: writes that run without a reservation."""
        return [a for a in self.actions.values() if a.effect is None and a.decision == "allow"]

    def targets(self, action: Optional[str]) -> Tuple[NotifyTarget, ...]:
        """Where the events of ``action`` go: its own ``notify`` list, else the global one."""
        entry = None if action is None else self.actions.get(action)
        if entry is not None and entry.notify is not None:
            return entry.notify
        return self.notify

    def escalation(self, action: Optional[str]) -> Optional[timedelta]:
        """How long a request of ``action`` may be pending before it escalates (``None``:
        never)."""
        entry = None if action is None else self.actions.get(action)
        if entry is not None and entry.escalate_after is not None:
            return entry.escalate_after
        return self.escalate_after


_TOP_KEYS = ("schema", "actions", "console_url", "notify", "escalate_after")
_ACTION_KEYS = (
    "effect, decision, approval_ttl, approvals, on_tool_error, call_timeout, replay, notify "
    "and escalate_after"
)


def _compose(text: str, path: str) -> yaml.Node:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise PolicyError(
            f"{path}:{line}: not valid YAML: {getattr(exc, 'problem', exc)}",
            file=path,
            line=line,
            field=None,
        ) from None
    if root is None:
        raise PolicyError(f"{path}: the policy file is empty", file=path, line=None, field=None)
    return root


def parse_policy(text: str, path: str) -> Policy:
    """Parse policy text; raises PolicyError naming ``path``, the line and the field."""
    root = _compose(text, path)
    top = {str(k.value): (k, v) for k, v in _mapping(path, root, "policy")}
    for name, (k, _) in top.items():
        if name not in _TOP_KEYS:
            raise _fail(
                path,
                k,
                name,
                "unknown key (expected schema, actions, console_url, notify and escalate_after)",
            )
    if "schema" not in top:
        raise _fail(path, root, "schema", f"missing; write `schema: {SCHEMA}`")
    schema_node = top["schema"][1]
    if _scalar(path, schema_node, "schema") != SCHEMA:
        raise _fail(
            path, schema_node, "schema", f"is {schema_node.value!r}; this version reads {SCHEMA!r}"
        )
    actions: Dict[str, ActionPolicy] = {}
    if "actions" in top and not absent(top["actions"][1]):
        for k, v in _mapping(path, top["actions"][1], "actions"):
            entry = _action(path, k, v)
            actions[entry.name] = entry
    console_url = None
    if "console_url" in top:
        console_url = parse_console_url(path, top["console_url"][1], "console_url")
    targets: Tuple[NotifyTarget, ...] = ()
    if "notify" in top:
        targets = parse_targets(path, top["notify"][1], "notify")
    escalate_after = None
    if "escalate_after" in top:
        escalate_after = _duration(path, top["escalate_after"][1], "escalate_after")
    notifies = bool(targets) or any(a.notify for a in actions.values())
    return Policy(path, actions, console_url, targets, escalate_after, notifies)


def _action(path: str, k: yaml.Node, v: yaml.Node) -> ActionPolicy:
    """One entry of ``actions``."""
    name = str(k.value)
    fieldname = f"actions.{name}"
    if not name.strip() or not name.isprintable():
        raise _fail(path, k, fieldname, "an action name must be printable text")
    effect: Optional[str] = None
    decision = "allow"
    decided = False
    on_tool_error = "ambiguous"
    call_timeout: Optional[timedelta] = None
    replay: Optional[bool] = None
    notify: Optional[Tuple[NotifyTarget, ...]] = None
    ttl: Optional[timedelta] = None
    escalate: Optional[timedelta] = None
    approvals: Optional[int] = None
    # the approve-only keys given, by name: their nodes (for the error if the decision is not)
    only_approve: Dict[str, yaml.Node] = {}
    for ek, ev in _mapping(path, v, fieldname):
        key = str(ek.value)
        sub = f"{fieldname}.{key}"
        if key == "effect":
            effect = _scalar(path, ev, sub)
            try:
                _core.Template(effect)
            except InvalidArgument as exc:
                raise _fail(path, ev, sub, str(exc)) from None
        elif key == "decision":
            decided = True
            decision = _scalar(path, ev, sub)
            if decision not in DECISIONS:
                raise _fail(path, ev, sub, f"is {decision!r}; expected allow, approve or deny")
        elif key == "approval_ttl":
            only_approve[key], ttl = ev, _duration(path, ev, sub)
        elif key == "escalate_after":
            only_approve[key], escalate = ev, _duration(path, ev, sub)
        elif key == "approvals":
            only_approve[key], approvals = ev, integer(path, ev, sub, 1, MAX_APPROVALS)
        elif key == "on_tool_error":
            on_tool_error = _scalar(path, ev, sub)
            if on_tool_error not in ("ambiguous", "failed"):
                raise _fail(path, ev, sub, f"is {on_tool_error!r}; expected ambiguous or failed")
        elif key == "call_timeout":
            call_timeout = _duration(path, ev, sub)
        elif key == "replay":
            if not (isinstance(ev, yaml.ScalarNode) and ev.tag == "tag:yaml.org,2002:bool"):
                raise _fail(path, ev, sub, "must be true or false")
            replay = str(ev.value).lower() in ("true", "yes", "on")
        elif key == "notify":
            notify = parse_targets(path, ev, sub)
        else:
            raise _fail(path, ek, sub, f"unknown key (expected {_ACTION_KEYS})")
    if decision != "approve":
        for key, node in only_approve.items():
            raise _fail(path, node, f"{fieldname}.{key}", "applies to decision: approve only")
    if ttl is not None and escalate is not None and escalate >= ttl:
        raise _fail(
            path,
            only_approve["escalate_after"],
            f"{fieldname}.escalate_after",
            "is not shorter than approval_ttl: the request would expire before it escalates",
        )
    return ActionPolicy(
        name,
        effect,
        decision,
        k.start_mark.line + 1,
        ttl,
        decided,
        on_tool_error,
        call_timeout,
        replay,
        approvals,
        notify,
        escalate,
    )


def load_policy(path: str) -> Policy:
    """Read and parse the policy file at ``path``."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise PolicyError(
            f"{path}: cannot read the policy file: {exc.strerror or exc}",
            file=path,
            line=None,
            field=None,
        ) from None
    except UnicodeDecodeError as exc:
        raise PolicyError(
            f"{path}: the policy file is not UTF-8 text: {exc}", file=path, line=None, field=None
        ) from None
    return parse_policy(text, path)


_lock = threading.Lock()
_cache: Dict[str, Tuple[Tuple[int, int, int, int], Policy]] = {}


def policy_path() -> Tuple[str, bool]:
    """The policy file to use and whether it was named explicitly (``CTRLRUN_CONFIG``)."""
    named = os.environ.get("CTRLRUN_CONFIG")
    if named:
        return os.path.abspath(named), True
    return os.path.abspath(DEFAULT_FILE), False


# ``os.environ.get`` encodes the name and decodes the value on every call (about a
# microsecond, on every protected call). CPython's mapping keeps its own dict of encoded names,
# updated by every change made through ``os.environ``: that is read instead, while
# ``os.environ`` is that mapping (a test may replace it with another, which is then asked).
_ENVIRON = getattr(os, "_Environ", None)
try:
    _CONFIG_KEY: object = os.environ.encodekey("CTRLRUN_CONFIG")
except AttributeError:  # pragma: no cover - another interpreter's os.environ
    _CONFIG_KEY = None
if not isinstance(_CONFIG_KEY, (bytes, str)):  # pragma: no cover - imported under a mock
    _ENVIRON = None
# Whether ./ctrlrun.yaml is there is asked with the process's effective ids, as stat() asks
# (access() would use the real ones: a setuid process could miss a policy it can read).
_EFFECTIVE_ACCESS = os.access in os.supports_effective_ids


def _config_named() -> bool:
    """Whether ``CTRLRUN_CONFIG`` is set to a non-empty value."""
    env = os.environ
    if _ENVIRON is not None and type(env) is _ENVIRON:
        return bool(env._data.get(_CONFIG_KEY))  # type: ignore[attr-defined]
    return bool(env.get("CTRLRUN_CONFIG"))


def _default_file_absent() -> bool:
    if _EFFECTIVE_ACCESS:
        return not os.access(DEFAULT_FILE, os.F_OK, effective_ids=True)
    return not os.path.isfile(DEFAULT_FILE)  # pragma: no cover - no faccessat(AT_EACCESS)


def current_policy() -> Optional[Policy]:
    """The policy in force, re-read when the file changes; ``None`` when there is none.

    Called on every protected call, so the common case (no ``CTRLRUN_CONFIG``, no
    ``./ctrlrun.yaml``) is one ``access`` of a relative path: no exception, no ``stat``
    result to build."""
    if not _config_named() and _default_file_absent():
        return None
    path, named = policy_path()
    try:
        st = os.stat(path)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the name
        if not named:  # as os.path.isfile: ./ctrlrun.yaml that cannot be looked at is none
            return None
        if isinstance(exc, FileNotFoundError):
            raise PolicyError(
                f"{path}: CTRLRUN_CONFIG names a policy file that does not exist",
                file=path,
                line=None,
                field=None,
            ) from None
        raise PolicyError(
            f"{path}: cannot read the policy file CTRLRUN_CONFIG names ({getattr(exc, 'strerror', None) or exc})",
            file=path,
            line=None,
            field=None,
        ) from None
    if not named and not stat.S_ISREG(st.st_mode):  # ./ctrlrun.yaml that is not a file
        return None
    # The change time too: a same-size edit that restores the modification time (cp -p,
    # rsync -a, tar) still moves it, and nothing can set it back.
    stamp = (st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns)
    hit = _cache.get(path)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    policy = load_policy(path)
    with _lock:
        _cache[path] = (stamp, policy)
    return policy

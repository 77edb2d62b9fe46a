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

from ctrlrun import _core
from ctrlrun.errors import InvalidArgument, PolicyError

__all__ = ["Policy", "ActionPolicy", "load_policy", "current_policy", "SCHEMA", "DEFAULT_FILE"]

SCHEMA = "ctrlrun.policy/v2"
DEFAULT_FILE = "ctrlrun.yaml"
DECISIONS = ("allow", "approve", "deny")


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


@dataclass(frozen=True)
class Policy:
    path: str
    actions: Dict[str, ActionPolicy] = field(default_factory=dict)

    def unreserved(self) -> List[ActionPolicy]:
        """Allowed actions with no effect template: writes that run without a reservation."""
        return [a for a in self.actions.values() if a.effect is None and a.decision == "allow"]


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _duration(path: str, node: yaml.Node, fieldname: str) -> timedelta:
    """``90``, ``90s``, ``15m``, ``2h`` or ``1d``: from 1 second to 30 days."""
    numeric = isinstance(node, yaml.ScalarNode) and node.tag in (
        "tag:yaml.org,2002:int",
        "tag:yaml.org,2002:float",
    )
    text = (str(node.value) if numeric else _scalar(path, node, fieldname)).strip()
    number, unit = (text[:-1], text[-1]) if text[-1:] in _UNITS else (text, "s")
    try:
        seconds = float(number) * _UNITS[unit]
    except ValueError:
        seconds = float("nan")
    if not (1 <= seconds <= 30 * 86400):
        raise _fail(
            path,
            node,
            fieldname,
            f"is {text!r}; expected a duration such as 90s, 15m, 2h or 1d (from 1 second to 30 days)",
        )
    return timedelta(seconds=seconds)


def _fail(path: str, node: Optional[yaml.Node], fieldname: str, problem: str) -> PolicyError:
    line = node.start_mark.line + 1 if node is not None else None
    where = f"{path}:{line}" if line is not None else path
    return PolicyError(f"{where}: {fieldname}: {problem}", file=path, line=line, field=fieldname)


def _scalar(path: str, node: yaml.Node, fieldname: str) -> str:
    if not isinstance(node, yaml.ScalarNode) or node.tag != "tag:yaml.org,2002:str":
        raise _fail(path, node, fieldname, "must be a string")
    return str(node.value)


def _mapping(path: str, node: yaml.Node, fieldname: str) -> List[Tuple[yaml.Node, yaml.Node]]:
    if not isinstance(node, yaml.MappingNode):
        raise _fail(path, node, fieldname, "must be a mapping")
    seen: Dict[str, yaml.Node] = {}
    for k, _ in node.value:
        name = _scalar(path, k, f"{fieldname} key")
        if name in seen:
            raise _fail(
                path,
                k,
                f"{fieldname}.{name}",
                f"appears twice (first on line {seen[name].start_mark.line + 1})",
            )
        seen[name] = k
    return list(node.value)


def parse_policy(text: str, path: str) -> Policy:
    """Parse policy text; raises PolicyError naming ``path``, the line and the field."""
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
    top = {str(k.value): (k, v) for k, v in _mapping(path, root, "policy")}
    for name, (k, _) in top.items():
        if name not in ("schema", "actions"):
            raise _fail(path, k, name, "unknown key (expected schema and actions)")
    if "schema" not in top:
        raise _fail(path, root, "schema", f"missing; write `schema: {SCHEMA}`")
    schema_node = top["schema"][1]
    if _scalar(path, schema_node, "schema") != SCHEMA:
        raise _fail(
            path, schema_node, "schema", f"is {schema_node.value!r}; this version reads {SCHEMA!r}"
        )
    actions: Dict[str, ActionPolicy] = {}
    if "actions" in top:
        actions_node = top["actions"][1]
        if not (
            isinstance(actions_node, yaml.ScalarNode) and actions_node.value in ("", "~", "null")
        ):
            for k, v in _mapping(path, actions_node, "actions"):
                name = str(k.value)
                fieldname = f"actions.{name}"
                if not name.strip() or not name.isprintable():
                    raise _fail(path, k, fieldname, "an action name must be printable text")
                effect: Optional[str] = None
                decision = "allow"
                approval_ttl: Optional[timedelta] = None
                ttl_node: Optional[yaml.Node] = None
                decided = False
                on_tool_error = "ambiguous"
                call_timeout: Optional[timedelta] = None
                replay: Optional[bool] = None
                for ek, ev in _mapping(path, v, fieldname):
                    key = str(ek.value)
                    if key == "effect":
                        effect = _scalar(path, ev, f"{fieldname}.effect")
                        try:
                            _core.Template(effect)
                        except InvalidArgument as exc:
                            raise _fail(path, ev, f"{fieldname}.effect", str(exc)) from None
                    elif key == "decision":
                        decided = True
                        decision = _scalar(path, ev, f"{fieldname}.decision")
                        if decision not in DECISIONS:
                            raise _fail(
                                path,
                                ev,
                                f"{fieldname}.decision",
                                f"is {decision!r}; expected allow, approve or deny",
                            )
                    elif key == "approval_ttl":
                        ttl_node = ev
                        approval_ttl = _duration(path, ev, f"{fieldname}.approval_ttl")
                    elif key == "on_tool_error":
                        on_tool_error = _scalar(path, ev, f"{fieldname}.on_tool_error")
                        if on_tool_error not in ("ambiguous", "failed"):
                            raise _fail(
                                path,
                                ev,
                                f"{fieldname}.on_tool_error",
                                f"is {on_tool_error!r}; expected ambiguous or failed",
                            )
                    elif key == "call_timeout":
                        call_timeout = _duration(path, ev, f"{fieldname}.call_timeout")
                    elif key == "replay":
                        if not (
                            isinstance(ev, yaml.ScalarNode) and ev.tag == "tag:yaml.org,2002:bool"
                        ):
                            raise _fail(path, ev, f"{fieldname}.replay", "must be true or false")
                        replay = str(ev.value).lower() in ("true", "yes", "on")
                    else:
                        raise _fail(
                            path,
                            ek,
                            f"{fieldname}.{key}",
                            "unknown key (expected effect, decision, approval_ttl, "
                            "on_tool_error, call_timeout and replay)",
                        )
                if approval_ttl is not None and decision != "approve":
                    raise _fail(
                        path,
                        ttl_node,
                        f"{fieldname}.approval_ttl",
                        "applies to decision: approve only",
                    )
                actions[name] = ActionPolicy(
                    name,
                    effect,
                    decision,
                    k.start_mark.line + 1,
                    approval_ttl,
                    decided,
                    on_tool_error,
                    call_timeout,
                    replay,
                )
    return Policy(path, actions)


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

"""Reading the policy file's YAML nodes: each helper either returns the value or raises a
:class:`~ctrlrun.PolicyError` naming the file, the node's line and the field."""

from __future__ import annotations

from datetime import timedelta
from typing import Dict, List, Optional, Tuple

import yaml

from ctrlrun.errors import PolicyError

__all__ = ["duration", "fail", "scalar", "mapping", "sequence", "integer", "absent"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def fail(path: str, node: Optional[yaml.Node], fieldname: str, problem: str) -> PolicyError:
    """The error for ``fieldname`` at ``node`` (its line; none when ``node`` is ``None``)."""
    line = node.start_mark.line + 1 if node is not None else None
    where = f"{path}:{line}" if line is not None else path
    return PolicyError(f"{where}: {fieldname}: {problem}", file=path, line=line, field=fieldname)


def scalar(path: str, node: yaml.Node, fieldname: str) -> str:
    """A YAML string (not a number, a list or null)."""
    if not isinstance(node, yaml.ScalarNode) or node.tag != "tag:yaml.org,2002:str":
        raise fail(path, node, fieldname, "must be a string")
    return str(node.value)


def absent(node: yaml.Node) -> bool:
    """Whether ``node`` is an empty value (``key:`` with nothing, ``~`` or ``null``)."""
    return isinstance(node, yaml.ScalarNode) and node.value in ("", "~", "null")


def integer(path: str, node: yaml.Node, fieldname: str, low: int, high: int) -> int:
    """A YAML integer from ``low`` to ``high``."""
    if not (isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:int"):
        raise fail(path, node, fieldname, f"must be a whole number from {low} to {high}")
    try:
        value = int(str(node.value).replace("_", ""), 0)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise fail(
            path, node, fieldname, f"is {node.value}; expected a whole number from {low} to {high}"
        )
    return value


def duration(path: str, node: yaml.Node, fieldname: str) -> timedelta:
    """``90``, ``90s``, ``15m``, ``2h`` or ``1d``: from 1 second to 30 days."""
    numeric = isinstance(node, yaml.ScalarNode) and node.tag in (
        "tag:yaml.org,2002:int",
        "tag:yaml.org,2002:float",
    )
    text = (str(node.value) if numeric else scalar(path, node, fieldname)).strip()
    number, unit = (text[:-1], text[-1]) if text[-1:] in _UNITS else (text, "s")
    try:
        seconds = float(number) * _UNITS[unit]
    except ValueError:
        seconds = float("nan")
    if not (1 <= seconds <= 30 * 86400):
        raise fail(
            path,
            node,
            fieldname,
            f"is {text!r}; expected a duration such as 90s, 15m, 2h or 1d (from 1 second to 30 days)",
        )
    return timedelta(seconds=seconds)


def mapping(path: str, node: yaml.Node, fieldname: str) -> List[Tuple[yaml.Node, yaml.Node]]:
    """The ``(key, value)`` nodes of a mapping whose keys are strings, each once."""
    if not isinstance(node, yaml.MappingNode):
        raise fail(path, node, fieldname, "must be a mapping")
    seen: Dict[str, yaml.Node] = {}
    for k, _ in node.value:
        name = scalar(path, k, f"{fieldname} key")
        if name in seen:
            raise fail(
                path,
                k,
                f"{fieldname}.{name}",
                f"appears twice (first on line {seen[name].start_mark.line + 1})",
            )
        seen[name] = k
    return list(node.value)


def sequence(path: str, node: yaml.Node, fieldname: str) -> List[yaml.Node]:
    """The items of a list (``[]`` or ``- item`` lines)."""
    if not isinstance(node, yaml.SequenceNode):
        raise fail(path, node, fieldname, "must be a list")
    return list(node.value)

"""The policy's notification keys: ``console_url``, ``notify`` (webhook targets) and the URL
rules every webhook and link must meet. Parsed from YAML nodes (``file.py`` calls these);
every problem is a :class:`~ctrlrun.PolicyError` naming the file, the line and the field.

A webhook URL is a secret (a Slack incoming-webhook URL is its own credential), so no message
here ever shows more of one than ``scheme://host``."""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from typing import Optional, Tuple
from urllib.parse import SplitResult, urlsplit

import yaml

from ctrlrun.policy.nodes import absent, fail, mapping, scalar, sequence

__all__ = [
    "NotifyTarget",
    "FORMATS",
    "MAX_TARGETS",
    "MIN_SECRET",
    "parse_targets",
    "parse_console_url",
    "url_problem",
    "redact",
]

FORMATS = ("slack", "json")
#: At most this many targets in one ``notify`` list.
MAX_TARGETS = 10
#: The shortest HMAC secret accepted: bytes of the variable's value (the key's own size).
MIN_SECRET = 32
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_KEYS = ("url", "url_env", "format", "secret_env")


@dataclass(frozen=True)
class NotifyTarget:
    """One webhook of a ``notify`` list: where (a literal ``url`` or the variable ``url_env``
    that holds it), the body's ``format`` (``slack`` or ``json``), and for ``json`` the
    variable holding the HMAC-SHA256 key (``secret_env``). ``where`` names it for logs:
    ``file:line: field`` (never the URL)."""

    format: str
    url: Optional[str]
    url_env: Optional[str]
    secret_env: Optional[str]
    where: str


def redact(url: str) -> str:
    """``scheme://host[:port]`` of ``url``: what a log or message may show of a webhook."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        return "<a malformed URL>"
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme or '?'}://{host}{port}"


def _loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def url_problem(url: str, what: str = "a webhook URL", query_allowed: bool = True) -> Optional[str]:
    """Why ``url`` may not be used (``None``: it may): https, or http to a loopback host only;
    no user name or password in it; no spaces or control characters; no fragment."""
    if not url or any(c.isspace() or not c.isprintable() for c in url):
        return f"{what} must be one line of printable text without spaces"
    try:
        parts: SplitResult = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        return f"{what} is malformed (its host or port cannot be read)"
    scheme = parts.scheme.lower()
    if scheme not in ("https", "http") or not parts.hostname:
        return f"{what} must be an https:// URL with a host"
    shown = redact(url)
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        return f"{what} ({shown}) must not carry a user name or password"
    if scheme == "http" and not _loopback(parts.hostname):
        return f"{what} ({shown}) uses http:// to a host that is not loopback; use https://"
    if parts.fragment:
        return f"{what} ({shown}) must not have a #fragment"
    if not query_allowed and parts.query:
        return f"{what} ({shown}) must not have a ?query"
    return None


def env_value(name: str) -> Optional[str]:
    """The variable's value, or ``None`` when it is unset or blank."""
    value = os.environ.get(name)
    return value if value and value.strip() else None


def _env_name(path: str, node: yaml.Node, fieldname: str) -> str:
    name = scalar(path, node, fieldname)
    if not _ENV_NAME.match(name):
        raise fail(path, node, fieldname, f"is {name!r}; expected an environment variable name")
    return name


def secret_problem(name: str) -> Optional[str]:
    """Why the secret in the variable ``name`` cannot sign a body (``None``: it can)."""
    value = env_value(name)
    if value is None:
        return f"the environment variable {name} (the signing secret) is not set"
    if len(value.encode("utf-8", "surrogateescape")) < MIN_SECRET:
        return (
            f"the secret in {name} is shorter than {MIN_SECRET} bytes; set {name} to at least "
            f"{MIN_SECRET} random bytes (for example: openssl rand -hex 32)"
        )
    return None


def _target(path: str, node: yaml.Node, fieldname: str) -> NotifyTarget:
    given = {str(k.value): (k, v) for k, v in mapping(path, node, fieldname)}
    for key, (k, _) in given.items():
        if key not in _KEYS:
            raise fail(
                path,
                k,
                f"{fieldname}.{key}",
                "unknown key (expected url or url_env, format, secret_env)",
            )
    if ("url" in given) == ("url_env" in given):
        raise fail(path, node, fieldname, "give exactly one of url and url_env")
    if "format" not in given:
        raise fail(
            path, node, f"{fieldname}.format", "missing; write format: slack or format: json"
        )
    fmt_node = given["format"][1]
    fmt = scalar(path, fmt_node, f"{fieldname}.format")
    if fmt not in FORMATS:
        raise fail(path, fmt_node, f"{fieldname}.format", f"is {fmt!r}; expected slack or json")
    url: Optional[str] = None
    url_env: Optional[str] = None
    if "url" in given:
        url_node = given["url"][1]
        url = scalar(path, url_node, f"{fieldname}.url")
        problem = url_problem(url)
        if problem is not None:
            raise fail(path, url_node, f"{fieldname}.url", problem)
    else:
        env_node = given["url_env"][1]
        url_env = _env_name(path, env_node, f"{fieldname}.url_env")
        value = env_value(url_env)
        problem = (
            f"the environment variable {url_env} is not set"
            if value is None
            else url_problem(value.strip(), f"the URL in {url_env}")
        )
        if problem is not None:
            raise fail(path, env_node, f"{fieldname}.url_env", problem)
    secret_env: Optional[str] = None
    if "secret_env" in given:
        secret_node = given["secret_env"][1]
        if fmt == "slack":
            raise fail(
                path,
                secret_node,
                f"{fieldname}.secret_env",
                "applies to format: json only (a Slack webhook URL is its own credential)",
            )
        secret_env = _env_name(path, secret_node, f"{fieldname}.secret_env")
        problem = secret_problem(secret_env)
        if problem is not None:
            raise fail(path, secret_node, f"{fieldname}.secret_env", problem)
    elif fmt == "json":
        raise fail(
            path,
            node,
            f"{fieldname}.secret_env",
            "missing; a json body is signed (HMAC-SHA256) with the secret in this variable",
        )
    line = node.start_mark.line + 1
    return NotifyTarget(fmt, url, url_env, secret_env, f"{path}:{line}: {fieldname}")


def parse_targets(path: str, node: yaml.Node, fieldname: str) -> Tuple[NotifyTarget, ...]:
    """A ``notify`` list (empty: no notifications)."""
    if absent(node):
        return ()
    items = sequence(path, node, fieldname)
    if len(items) > MAX_TARGETS:
        raise fail(path, node, fieldname, f"has {len(items)} entries; at most {MAX_TARGETS}")
    return tuple(_target(path, item, f"{fieldname}[{i}]") for i, item in enumerate(items))


def parse_console_url(path: str, node: yaml.Node, fieldname: str) -> str:
    """The console's address (``https://host:8780``), without a trailing slash."""
    url = scalar(path, node, fieldname).strip()
    problem = url_problem(url, "the console's URL", query_allowed=False)
    if problem is not None:
        raise fail(path, node, fieldname, problem)
    return url.rstrip("/")

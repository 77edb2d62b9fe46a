"""Where ``protect`` meets an agent framework: a tool object it is handed (protected through
that framework's integration), a raw function a framework has already registered (refused:
the framework would call it unprotected), and a tuple given back by ``replay``.

No framework is imported here: they are recognised by the package their classes come from,
and only when that package is already loaded."""

from __future__ import annotations

import gc
import importlib
import inspect
import sys
import typing
from typing import Any, Callable, Dict, Optional, Tuple

from ctrlrun.errors import InvalidArgument

# A tool object -> the integration that protects it: (package, class names along the MRO).
_TOOL_OBJECTS: Tuple[Tuple[str, Tuple[str, ...], str], ...] = (
    ("langchain_core", ("BaseTool",), "langchain"),
    ("agents", ("FunctionTool",), "openai_agents"),
    ("pydantic_ai", ("Tool",), "pydantic_ai"),
)

# Frameworks whose tool decorators register the function and hand back the same function,
# so a ``protect`` above them would wrap a copy nobody calls: (package, registry class name,
# attribute holding the function, what to write instead).
_REGISTRARS: Tuple[Tuple[str, str, str, str], ...] = (
    (
        "pydantic_ai",
        "Tool",
        "function",
        "pydantic-ai: put @ctrlrun.protect (or ctrlrun.integrations.pydantic_ai.protect) "
        "below @agent.tool / @agent.tool_plain, next to the function",
    ),
    (
        "mcp",
        "Tool",
        "fn",
        "an MCP server: put @ctrlrun.protect (or ctrlrun.integrations.mcp.protect) below "
        "@server.tool(), next to the function",
    ),
)


def _framework_classes(obj: Any) -> Tuple[Tuple[str, str], ...]:
    """(top-level package, class name) along ``obj``'s MRO: a subclass defined elsewhere (a
    program's own ``BaseTool``, an integration's protected tool) is still the framework's."""
    return tuple((c.__module__.split(".", 1)[0], c.__name__) for c in type(obj).__mro__)


def protect_tool(obj: Any, name: str, options: Dict[str, Any]) -> Any:
    """``obj`` protected by its framework's integration, if it is one of a framework's tool
    objects; else ``None``."""
    if isinstance(obj, type) or inspect.isfunction(obj) or inspect.ismethod(obj):
        return None
    found = _framework_classes(obj)
    for package, classes, integration in _TOOL_OBJECTS:
        if any((package, c) in found for c in classes):
            module = importlib.import_module(f"ctrlrun.integrations.{integration}")
            return module.protect_tool(obj, name, options)
    return None


def _references(fn: Any) -> int:
    return sys.getrefcount(fn)


def _mirror_registered_by(fn: Any) -> int:
    return _references(fn)


def _mirror_refuse_registered(fn: Any) -> int:
    return _mirror_registered_by(fn)


def _mirror_decorate(fn: Any) -> int:
    return _mirror_refuse_registered(fn)


# What a function handed straight to ``protect``'s decorator is referenced by, along the same
# chain of calls (decorate -> refuse_registered -> registered_by): more means something else
# holds it, and only then are its holders searched.
_FRESH = _mirror_decorate(lambda: None)


def registered_by(fn: Callable[..., Any]) -> Optional[str]:
    """What to write instead, when a loaded framework already holds ``fn`` as a registered
    tool; ``None`` otherwise. The search walks every tracked object (tens of milliseconds in a
    large program), so it runs only at decoration, only when such a framework is loaded and
    only when something besides the decorator holds ``fn``."""
    loaded = [r for r in _REGISTRARS if r[0] in sys.modules]
    if not loaded or _references(fn) <= _FRESH:
        return None
    holders = gc.get_referrers(fn)
    dicts = [h for h in holders if type(h) is dict]
    owners = holders + (gc.get_referrers(*dicts) if dicts else [])
    for obj in owners:
        cls = type(obj)
        top = cls.__module__.split(".", 1)[0]
        for package, class_name, attribute, advice in loaded:
            if top == package and cls.__name__ == class_name:
                if getattr(obj, attribute, None) is fn:
                    return advice
    return None


def refuse_registered(name: str, fn: Callable[..., Any]) -> None:
    """Raise ``InvalidArgument`` when a framework already holds ``fn`` as a tool."""
    advice = registered_by(fn)
    if advice is not None:
        raise InvalidArgument(
            f"protect({name!r}): {getattr(fn, '__qualname__', fn)!r} is already registered as a "
            f"tool by {advice}: the framework would call the unprotected function"
        )


def tuple_maker(fn: Callable[..., Any]) -> Optional[Callable[[Any], Any]]:
    """For a ``fn`` annotated to return a tuple (``tuple[str, dict]``, a ``NamedTuple``),
    what turns the stored JSON list back into one for ``replay``; ``None`` otherwise."""
    try:
        hint = typing.get_type_hints(fn).get("return")
    except Exception:  # an annotation that does not resolve here: nothing to restore by
        return None
    origin = typing.get_origin(hint) or hint
    if origin is tuple:
        return lambda value: tuple(value) if isinstance(value, list) else value
    if isinstance(origin, type) and issubclass(origin, tuple) and hasattr(origin, "_fields"):
        named = origin
        fields = len(origin._fields)
        return lambda value: (
            named(*value) if isinstance(value, list) and len(value) == fields else value
        )
    return None

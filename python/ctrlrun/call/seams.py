"""Where ``protect`` meets an agent framework: a tool object it is handed (protected through
that framework's integration), a raw function a framework has already registered (refused:
the framework would call it unprotected), and a tuple given back by ``replay``.

No framework is imported here: they are recognised by the package their classes come from,
and only when that package is already loaded. A registered function is looked for in the
registries the decorating code's frames hold (see ``registered_by``), not on the heap."""

from __future__ import annotations

import importlib
import inspect
import sys
import typing
from types import FrameType
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from ctrlrun.errors import InvalidArgument

# A tool object -> the integration that protects it: (package, class names along the MRO).
_TOOL_OBJECTS: Tuple[Tuple[str, Tuple[str, ...], str], ...] = (
    ("langchain_core", ("BaseTool",), "langchain"),
    ("agents", ("FunctionTool",), "openai_agents"),
    ("pydantic_ai", ("Tool",), "pydantic_ai"),
    ("agent_framework", ("FunctionTool",), "agent_framework"),
    ("smolagents", ("Tool",), "smolagents"),
    ("strands", ("DecoratedFunctionTool",), "strands"),
    ("crewai", ("BaseTool",), "crewai"),
    ("google", ("FunctionTool",), "google_adk"),
    ("claude_agent_sdk", ("SdkMcpTool",), "claude_agent_sdk"),
    ("llama_index", ("FunctionTool",), "llama_index"),
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


# Frameworks whose tool decorators register the function and hand back the same function, so
# a ``protect`` above them would wrap a copy nobody calls. What holds the registered functions,
# (top-level package, class name along the MRO) -> its kind: a pydantic-ai ``Agent`` (its
# function toolset, and the ``FunctionToolset``s it was given), a ``FunctionToolset`` (its
# ``tools``: ``Tool`` objects, the function in ``.function``), an MCP SDK server (its tool
# manager's tools, the function in ``.fn``; ``FastMCP`` is the name before mcp 2).
_HOLDERS: Dict[Tuple[str, str], str] = {
    ("pydantic_ai", "Agent"): "agent",
    ("pydantic_ai", "FunctionToolset"): "toolset",
    ("mcp", "MCPServer"): "server",
    ("mcp", "FastMCP"): "server",
}

# What to write instead, by the package of the holder.
_ADVICE: Dict[str, str] = {
    "pydantic_ai": "pydantic-ai: put @ctrlrun.protect (or ctrlrun.integrations.pydantic_ai.protect) "
    "below @agent.tool / @agent.tool_plain, next to the function",
    "mcp": "an MCP server: put @ctrlrun.protect (or ctrlrun.integrations.mcp.protect) below "
    "@server.tool(), next to the function",
}

# The kind of holder a class is (``None``: none), by class: one look along its MRO per class. A
# class seen in a searched namespace is kept (bounded: emptied past _MAX_KINDS).
_KINDS: Dict[type, Optional[Tuple[str, str]]] = {}
_MAX_KINDS = 4096

# How many frames above ctrlrun's own are searched: the one applying the decorators, and a few
# callers (a function decorated in a nested function or a loop helper, the holder a local of an
# enclosing function that is still running).
_CALLER_FRAMES = 4
_MAX_FRAMES = 64  # ctrlrun's own frames skipped, at most


def _kind(cls: type) -> Optional[Tuple[str, str]]:
    """(package, kind) when instances of ``cls`` hold registered tools; else ``None``."""
    try:
        return _KINDS[cls]
    except KeyError:
        pass
    found: Optional[Tuple[str, str]] = None
    for c in getattr(cls, "__mro__", ()):
        module, name = getattr(c, "__module__", None), getattr(c, "__name__", None)
        if isinstance(module, str) and isinstance(name, str):
            package = module.split(".", 1)[0]
            kind = _HOLDERS.get((package, name))
            if kind is not None:
                found = (package, kind)
                break
    if len(_KINDS) >= _MAX_KINDS:
        _KINDS.clear()
    _KINDS[cls] = found
    return found


def _tools(holder: Any, kind: str) -> Iterator[Any]:
    """The registered functions ``holder`` (of ``kind``) keeps; read with ``getattr`` only, so
    a framework version that keeps them elsewhere finds nothing rather than failing."""
    if kind == "server":
        tools = getattr(getattr(holder, "_tool_manager", None), "_tools", None)
        if isinstance(tools, dict):
            for tool in list(tools.values()):
                yield getattr(tool, "fn", None)
        return
    if kind == "agent":
        toolsets = [getattr(holder, "_function_toolset", None)]
        toolsets.extend(getattr(holder, "_user_toolsets", None) or ())
    else:
        toolsets = [holder]
    for toolset in toolsets:
        if toolset is not holder and _kind(type(toolset)) != ("pydantic_ai", "toolset"):
            continue
        tools = getattr(toolset, "tools", None)
        if isinstance(tools, dict):
            for tool in list(tools.values()):
                yield getattr(tool, "function", None)


def _holding(namespace: Any, fn: Any, loaded: Tuple[str, ...]) -> Optional[str]:
    """The package of a holder among ``namespace``'s values that holds ``fn``; else ``None``."""
    try:
        values = list(namespace.values())
    except Exception:  # not a mapping we can read: nothing found there
        return None
    for value in values:
        found = _kind(type(value))
        if found is not None and found[0] in loaded:
            if any(f is fn for f in _tools(value, found[1])):
                return found[0]
    return None


def registered_by(fn: Callable[..., Any]) -> Optional[str]:
    """What to write instead, when a loaded framework already holds ``fn`` as a registered
    tool; ``None`` otherwise.

    Nothing is searched unless pydantic-ai or the MCP SDK is loaded. Then the namespaces of the
    frames calling ``protect`` are: ctrlrun's own frames are passed over, and in the next
    ``_CALLER_FRAMES`` frames (the one applying the decorators, and its callers) each local and
    global value that is a pydantic-ai ``Agent`` or ``FunctionToolset`` or an MCP SDK server
    has its tools looked through for ``fn``. That finds ``@ctrlrun.protect`` above
    ``@agent.tool`` / ``@server.tool()`` when the agent or server is a module global, a local
    (or a variable of an enclosing function) of the frame that decorates, or a class body's
    name. It does not find a holder reachable only through another object or module
    (``@self.agent.tool``, ``@app.server.tool()``), nor one held only by a frame further up:
    those go unrefused. Tens of microseconds; no heap walk."""
    loaded = tuple(p for p in _ADVICE if p in sys.modules)
    if not loaded:
        return None
    frame: Optional[FrameType] = sys._getframe(1)
    try:
        skipped = 0
        while frame is not None and skipped < _MAX_FRAMES:
            module = frame.f_globals.get("__name__")
            if not (
                isinstance(module, str) and (module == "ctrlrun" or module.startswith("ctrlrun."))
            ):
                break
            frame = frame.f_back
            skipped += 1
        searched: List[Any] = []  # the namespaces themselves: an id could be reused
        for _ in range(_CALLER_FRAMES):
            if frame is None:
                break
            for namespace in (frame.f_locals, frame.f_globals):
                if any(n is namespace for n in searched):
                    continue
                searched.append(namespace)
                package = _holding(namespace, fn, loaded)
                if package is not None:
                    return _ADVICE[package]
            frame = frame.f_back
    finally:
        del frame  # a frame kept in a local of its own callee would be a reference cycle
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

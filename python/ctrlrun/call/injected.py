"""Parameters an agent framework fills in itself (a run context, the tool call's id, the
graph's state): never part of a call's identity, so never in its effect key, its fingerprint
or what an approver is shown.

They are recognised by the type a parameter is annotated with, along its MRO: a generic's
origin (``RunContext[Deps]``), the members of ``Optional``/``Union``, and the metadata of
``Annotated[str, InjectedToolCallId]``. The frameworks are never imported here: a type is
matched by its top-level package and class name, so a function of a program that does not
use that framework is never affected. A string annotation (``from __future__ import
annotations``) is resolved with ``typing.get_type_hints``; one that cannot be resolved is
matched by the class names below that no other library uses."""

from __future__ import annotations

import inspect
import typing
from typing import Any, Callable, FrozenSet, Iterator, Tuple

#: (top-level package, class name) of what each framework injects.
INJECTED: FrozenSet[Tuple[str, str]] = frozenset(
    {
        ("pydantic_ai", "RunContext"),
        ("agents", "RunContextWrapper"),
        ("agents", "ToolContext"),
        ("langchain_core", "RunnableConfig"),
        ("langchain_core", "InjectedToolArg"),  # InjectedToolCallId, langgraph's InjectedState...
        ("langchain_core", "InjectedToolCallId"),
        ("langchain_core", "BaseCallbackManager"),  # a tool function's `callbacks: Callbacks`
        ("langgraph", "InjectedState"),
        ("langgraph", "InjectedStore"),
        ("langgraph", "ToolRuntime"),
        ("langchain", "ToolRuntime"),
        ("mcp", "Context"),
        ("agent_framework", "FunctionInvocationContext"),
        ("strands", "ToolContext"),  # a Strands @tool(context=True) function's tool_context
        ("strands", "Agent"),  # a Strands tool function's `agent: Agent`
        # google-adk: ToolContext and CallbackContext are aliases of google.adk.agents.Context
        ("google", "Context"),
        ("google", "ReadonlyContext"),
        ("workflows", "Context"),  # LlamaIndex's workflow Context (llama_index.core.workflow)
    }
)

# Names matched in an annotation that cannot be resolved (no other library's type is meant).
_UNRESOLVED_NAMES = frozenset(
    {
        "RunContext",
        "RunContextWrapper",
        "ToolContext",
        "RunnableConfig",
        "InjectedToolArg",
        "InjectedToolCallId",
        "InjectedState",
        "InjectedStore",
        "ToolRuntime",
        "FunctionInvocationContext",
        "CallbackContext",
    }
)


def _is_framework_class(tp: Any) -> bool:
    mro = getattr(tp, "__mro__", None)
    if not isinstance(mro, tuple):
        mro = (tp,)
    for cls in mro:
        module = getattr(cls, "__module__", None)
        name = getattr(cls, "__name__", None)
        if isinstance(module, str) and isinstance(name, str):
            if (module.split(".", 1)[0], name) in INJECTED:
                return True
    return False


def _members(annotation: Any, depth: int = 0) -> Iterator[Any]:
    """The types an annotation names: itself, a generic's origin and arguments of a Union, the
    metadata of ``Annotated`` (an instance's class too)."""
    if depth > 8:
        return
    yield annotation
    if not isinstance(annotation, type) and annotation is not None:
        yield type(annotation)  # Annotated metadata given as an instance
    origin = typing.get_origin(annotation)
    if origin is None:
        return
    yield origin
    if origin is typing.Annotated:
        base, *meta = typing.get_args(annotation)
        yield from _members(base, depth + 1)
        for m in meta:
            yield from _members(m, depth + 1)
    elif origin is typing.Union or getattr(origin, "__name__", "") == "UnionType":
        for arg in typing.get_args(annotation):
            yield from _members(arg, depth + 1)


def _injected(annotation: Any) -> bool:
    if annotation is inspect.Parameter.empty:
        return False
    if isinstance(annotation, str):
        words = annotation.replace("[", " ").replace("]", " ").replace(",", " ").split()
        return any(w.rsplit(".", 1)[-1] in _UNRESOLVED_NAMES for w in words)
    try:
        return any(_is_framework_class(t) for t in _members(annotation))
    except Exception:  # an annotation object that will not be inspected: not a framework's
        return False


def injected_parameters(fn: Callable[..., Any], signature: inspect.Signature) -> FrozenSet[str]:
    """The names of ``fn``'s parameters a framework fills in."""
    params = signature.parameters
    if not params:
        return frozenset()
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # a forward reference that does not resolve here: the raw annotations
        hints = {}
    return frozenset(name for name, p in params.items() if _injected(hints.get(name, p.annotation)))

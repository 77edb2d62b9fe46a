"""ctrlrun for smolagents (``pip install 'ctrlrun[smolagents]'``).

:func:`protect` takes the keyword arguments of :func:`ctrlrun.protect` and works in either order
with smolagents' ``@tool``, and on ``Tool`` subclasses:

* **under** ``@tool`` (next to the function) it protects the function ``@tool`` makes a tool of;
* **above** ``@tool`` (or given any ``Tool`` instance) it returns a protected copy of the tool:
  the same name, description, inputs and output type, its ``forward`` protected. A tool an
  agent already holds is refused (the agent would call it unprotected);
* on a ``Tool`` subclass (above ``class``) it returns a subclass whose ``forward`` is protected;
  on ``def forward(self, ...)`` inside the class body it protects that method (``self`` is never
  part of the call's fingerprint or what an approver is shown).

The core ``ctrlrun.protect`` is not told of smolagents' ``Tool``: handed one, it refuses it
(use this module's ``protect``); under ``@tool`` it protects, but its refusals are smolagents'
errors ("... Please try again or use another tool").

A refusal is the tool's return value, the text the model reads as the call's observation, in
the gateway's words ("already done: <key> committed at <time>; do not retry", "outcome unknown:
a person must resolve ...", "waiting for approval <id> ..."), never smolagents' "Error executing
tool ... Please try again or use another tool", and nothing is logged for it. The parallel twin
of a call in the same step (``ToolCallingAgent`` runs a step's calls on threads) is told "in
progress ...; do not retry now" while the first call runs to its end, its result kept.

smolagents has no human-in-the-loop for tools: a call that needs a person's approval
(``decision="approve"``) is checked before the body runs and answered "waiting for approval
<id>"; the run goes on. Once a person grants the request (``ctrlrun approve``, the console), a
later call with the same arguments runs once. A body that raises ``NotExecuted`` is left to
smolagents (its key recorded ``failed``, so the retry it invites may run).

smolagents calls tools synchronously; an ``async def`` ``forward`` of a ``Tool`` subclass protected
here is run to its end on an event loop of its own (on a worker thread when the calling thread
runs one). (``@tool`` itself refuses an ``async def`` function.)

smolagents injects no parameters into a tool's function. It may substitute a value of the
agent's state (``additional_args``) for an argument the model names it by: that value is then
the argument, in the key and fingerprint like any other.

A tool protected above ``@tool``, as a ``Tool`` or above ``class`` refuses to be exported for a
remote executor or the Hub (``to_dict``, ``save``, ``push_to_hub`` raise): the protection would
not go with it. (Under ``@tool``, smolagents exports the function's body without its decorators;
that cannot be seen from here: protect above ``@tool`` a tool that may be exported.)"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import copy
import functools
import gc
import inspect
from typing import Any, Callable, Dict, Optional

from smolagents import Tool  # type: ignore[import-untyped]  # (no py.typed)
from smolagents.agents import MultiStepAgent  # type: ignore[import-untyped]

from ctrlrun.call.protect import protect as _protect
from ctrlrun.errors import InvalidArgument
from ctrlrun.integrations._common import Refusal, answering, protected, refuse_twice

__all__ = ["protect", "protect_tool", "answer"]

_NOT_SERIALISED = (
    "the smolagents tool {name!r} is protected by ctrlrun, and its code cannot be exported (a "
    "remote executor, save, push_to_hub): the copy would run unprotected. Use the local "
    "executor, or protect the tool's function where it runs"
)


# The Tool whose protected ``forward`` is running (see _method).
_SELF: contextvars.ContextVar[Any] = contextvars.ContextVar("ctrlrun_smolagents_tool")


def answer(refusal: Refusal) -> str:
    """What smolagents hands the model for a refusal: its text, as the call's observation."""
    return refusal.text


def protect(name: str, **options: Any) -> Callable[[Any], Any]:
    """``ctrlrun.protect(name, **options)`` whose refusals are smolagents observations
    (:func:`answer`). Decorates a function (under ``@tool``, or a ``Tool`` subclass's
    ``forward``), a ``Tool`` (above ``@tool``) or a ``Tool`` subclass."""
    _protect(name, **options)  # the options checked now, before anything is decorated

    def decorate(target: Any) -> Any:
        if isinstance(target, Tool):
            return protect_tool(target, name, options)
        if isinstance(target, type) and issubclass(target, Tool):
            return _protect_class(target, name, options)
        refuse_twice(name, target)
        return _function(target, name, options)

    return decorate


def _function(fn: Any, name: str, options: Dict[str, Any]) -> Callable[..., Any]:
    """``fn`` protected, answering refusals as text (an ``async def`` run to its end); a
    method's ``self`` is handed to it aside, never one of the call's arguments."""
    if not callable(fn):
        raise InvalidArgument(f"protect({name!r}) decorates a function or a Tool, got {fn!r}")
    try:
        sig: Optional[inspect.Signature] = inspect.signature(fn)
    except (TypeError, ValueError):
        sig = None  # the core protect says why
    if sig is not None and list(sig.parameters)[:1] == ["self"]:
        return _method(fn, sig, name, options)
    guarded = answering(_protect(name, **options)(fn), answer)
    return _synchronous(guarded) if inspect.iscoroutinefunction(guarded) else guarded


def _method(
    fn: Callable[..., Any], sig: inspect.Signature, name: str, options: Dict[str, Any]
) -> Callable[..., Any]:
    """A ``Tool``'s ``forward(self, ...)`` protected as a function of its other parameters: the
    tool is passed to the body through the context, so it is never in the call's fingerprint
    or what an approver is shown."""
    if inspect.iscoroutinefunction(fn):

        async def body_async(*args: Any, **kwargs: Any) -> Any:
            return await fn(_SELF.get(), *args, **kwargs)

        body: Callable[..., Any] = body_async
    else:

        def body_sync(*args: Any, **kwargs: Any) -> Any:
            return fn(_SELF.get(), *args, **kwargs)

        body = body_sync
    for attribute in ("__module__", "__name__", "__qualname__", "__doc__", "__annotations__"):
        setattr(body, attribute, getattr(fn, attribute, None))
    body.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=list(sig.parameters.values())[1:]
    )
    guarded = answering(_protect(name, **options)(body), answer)
    call = _synchronous(guarded) if inspect.iscoroutinefunction(guarded) else guarded

    @functools.wraps(fn)
    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        token = _SELF.set(self)
        try:
            return call(*args, **kwargs)
        finally:
            _SELF.reset(token)

    forward.__ctrlrun__ = protected(guarded)  # type: ignore[attr-defined]
    return forward


def _synchronous(fn: Callable[..., Any]) -> Callable[..., Any]:
    """An ``async def`` as the sync function smolagents calls: awaited on a loop of its own,
    on a worker thread (in this thread's context) when this thread already runs a loop."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(fn(*args, **kwargs))
        context = contextvars.copy_context()
        with concurrent.futures.ThreadPoolExecutor(1) as worker:
            return worker.submit(context.run, asyncio.run, fn(*args, **kwargs)).result()

    return run


def _forward_of(tool: Tool) -> Callable[..., Any]:
    """A new function calling ``tool.forward`` with its parameters (``self`` left out: the
    ``forward`` of a ``@tool`` tool declares it though it takes none)."""
    forward = tool.forward
    try:
        sig = inspect.signature(forward)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(
            f"cannot read the signature of {tool.name!r}.forward: {exc}"
        ) from None
    parameters = list(sig.parameters.values())
    if parameters[:1] and parameters[0].name == "self":
        parameters = parameters[1:]

    if inspect.iscoroutinefunction(inspect.unwrap(forward)):

        async def call_async(*args: Any, **kwargs: Any) -> Any:
            return await forward(*args, **kwargs)

        call: Callable[..., Any] = call_async
    else:

        def call_sync(*args: Any, **kwargs: Any) -> Any:
            return forward(*args, **kwargs)

        call = call_sync
    call.__name__ = call.__qualname__ = str(tool.name)
    call.__doc__ = getattr(tool, "description", None)
    call.__signature__ = sig.replace(parameters=parameters)  # type: ignore[attr-defined]
    return call


def _refuse_export(name: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise InvalidArgument(_NOT_SERIALISED.format(name=name))

    return refuse


def protect_tool(tool: Tool, name: str, options: Dict[str, Any]) -> Tool:
    """A copy of ``tool`` (a smolagents ``Tool``, e.g. made by ``@tool``) whose ``forward`` is
    protected as ``protect(name, **options)`` does: the same name, description, inputs and output
    type. A tool an agent already holds, or one already protected, is refused."""
    if not isinstance(tool, Tool):
        raise InvalidArgument(f"protect({name!r}) expected a smolagents Tool, got {tool!r}")
    if protected(tool.forward) is not None or getattr(tool, "__ctrlrun__", None) is not None:
        raise InvalidArgument(f"protect({name!r}): the tool {tool.name!r} is already protected")
    holder = _holder(tool)
    if holder is not None:
        raise InvalidArgument(
            f"protect({name!r}): the tool {tool.name!r} is already in {holder}, which would call "
            f"it unprotected; protect the tool (or its function, under @tool) before giving it "
            f"to the agent"
        )
    guarded = _function(_forward_of(tool), name, options)
    made = copy.copy(tool)
    made.forward = guarded
    for export in ("to_dict", "save", "push_to_hub"):
        setattr(made, export, _refuse_export(tool.name))
    made.__ctrlrun__ = protected(guarded)
    return made


def _protect_class(cls: type, name: str, options: Dict[str, Any]) -> type:
    """A subclass of ``cls`` (a ``Tool`` subclass) whose ``forward`` is protected."""
    forward = cls.__dict__.get("forward") or getattr(cls, "forward", None)
    if protected(forward) is not None:
        raise InvalidArgument(f"protect({name!r}): {cls.__qualname__}.forward is already protected")
    tool_name = getattr(cls, "name", cls.__name__)
    namespace: Dict[str, Any] = {
        "forward": _function(forward, name, options),
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "__doc__": cls.__doc__,
    }
    for export in ("to_dict", "save", "push_to_hub"):
        namespace[export] = _refuse_export(str(tool_name))
    return type(cls.__name__, (cls,), namespace)


def _holder(tool: Tool) -> Optional[str]:
    """The agent already holding ``tool`` in its tools, if any."""
    for ref in gc.get_referrers(tool):
        if type(ref) is dict:
            for owner in gc.get_referrers(ref):
                if isinstance(owner, MultiStepAgent) and getattr(owner, "tools", None) is ref:
                    return f"the agent {getattr(owner, 'name', None) or type(owner).__name__}"
    return None

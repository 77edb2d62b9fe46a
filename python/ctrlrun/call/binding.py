"""How a protected call gets its effect key: the arguments bound to the signature, the
template rendered (docs/spec.md §7), and the policy file's say on which template applies."""

from __future__ import annotations

import enum
import inspect
import uuid
import warnings
from datetime import timedelta
from typing import Any, Callable, Dict, List, Optional, Tuple

import ctrlrun._core as _core
from ctrlrun.call.injected import injected_parameters
from ctrlrun.errors import ActionDenied, EffectKeyError, InvalidArgument
from ctrlrun.policy import current_policy, policy_path


class PolicyWarning(UserWarning):
    """A decorator and the policy file disagree about an action (the decorator wins)."""


def _int_text(template: str, name: str, value: int) -> str:
    try:
        return int.__repr__(value)
    except ValueError:  # past Python's digit limit for text (4,300 digits): no key is that long
        raise EffectKeyError(
            f"effect template {template!r}: placeholder '{name}' got an integer too long to "
            f"write as text (about {int(value.bit_length() * 0.30103)} digits)"
        ) from None


def render_value(template: str, name: str, value: Any) -> str:
    """One placeholder's value as key text (docs/spec.md §7)."""
    t = type(value)
    if t is str:
        if value:
            return str(value)
    elif t is int:
        return _int_text(template, name, value)
    elif isinstance(value, enum.Enum):
        inner = value.value
        if isinstance(inner, str) and not isinstance(inner, enum.Enum) and inner:
            return str.__str__(inner)
        if isinstance(inner, int) and not isinstance(inner, (bool, enum.Enum)):
            return _int_text(template, name, inner)
    elif isinstance(value, uuid.UUID):
        return str(value)
    elif isinstance(value, str):
        if value:
            return str.__str__(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        return _int_text(template, name, value)
    if value == "":
        what = "an empty string"
    else:
        try:
            shown = repr(value)
        except Exception:
            shown = "?"
        if len(shown) > 60:
            shown = shown[:57] + "..."
        name_ = t.__qualname__
        what = f"{'an' if name_[:1].lower() in 'aeiou' else 'a'} {name_} ({shown})"
    raise EffectKeyError(
        f"effect template {template!r}: placeholder '{name}' got {what}; an effect key is "
        f"made of non-empty str, int, uuid.UUID and str/int Enum values only"
    )


class KeyBinder:
    """Binds a call to the function's signature and renders the effect key."""

    __slots__ = (
        "by_keyword",
        "defaults",
        "injected",
        "names",
        "optional",
        "positional",
        "qualname",
        "required",
        "signature",
        "template",
    )

    def __init__(self, template: _core.Template, fn: Callable[..., Any], action: str) -> None:
        self.template = template
        self.qualname = getattr(fn, "__qualname__", repr(fn))
        try:
            self.signature = inspect.signature(fn)
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(
                f"protect({action!r}): cannot read the signature of {self.qualname}: {exc}"
            ) from None
        params = self.signature.parameters
        for p in params.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                star = "*" if p.kind is p.VAR_POSITIONAL else "**"
                raise InvalidArgument(
                    f"protect({action!r}): {self.qualname} takes {star}{p.name}; an effect key "
                    f"is bound from named parameters only, so *args/**kwargs are refused"
                )
        self.names: List[str] = list(template.placeholders)
        self.injected = injected_parameters(fn, self.signature)
        for name in self.names:
            if name in self.injected:
                raise EffectKeyError(
                    f"protect({action!r}): effect template {template.source!r} names "
                    f"'{name}', which the agent framework fills in ({self.qualname}'s "
                    f"parameter is annotated with its type): it changes from call to call, so "
                    f"it can never name the consequence. Name the parameters that do"
                )
            if name not in params:
                raise EffectKeyError(
                    f"protect({action!r}): effect template {template.source!r} names "
                    f"'{name}', which is not a parameter of {self.qualname}; available: "
                    f"{', '.join(params) or '(none)'}"
                )
        self.defaults = {n: params[n].default for n in self.names}
        # What `key` needs to bind a well-formed call without `Signature.bind` (which costs
        # more than the rest of the binding); anything unusual goes to `bind`, which raises
        # the TypeError Python would.
        kinds = inspect.Parameter
        self.positional = [
            p.name
            for p in params.values()
            if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)
        ]
        self.by_keyword = frozenset(
            p.name
            for p in params.values()
            if p.kind in (kinds.POSITIONAL_OR_KEYWORD, kinds.KEYWORD_ONLY)
        )
        self.required = frozenset(p.name for p in params.values() if p.default is p.empty)
        self.optional = [(p.name, p.default) for p in params.values() if p.default is not p.empty]

    def _bind(self, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Dict[str, Any]:
        """The arguments given, by name (defaults not filled in), as ``Signature.bind`` gives
        them; a call the signature refuses raises its TypeError."""
        positional = self.positional
        if len(args) <= len(positional):
            bound = dict(zip(positional, args))
            by_keyword = self.by_keyword
            for name in kwargs:
                if name in bound or name not in by_keyword:
                    break
            else:
                bound.update(kwargs)
                if self.required.issubset(bound):
                    return bound
        return self.signature.bind(*args, **kwargs).arguments

    def bind(self, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Tuple[str, Dict[str, Any]]:
        """The call's effect key, and every parameter's value with defaults filled in (what
        its fingerprint is made of). A call the signature refuses raises TypeError here,
        before anything is reserved."""
        arguments = self._bind(args, kwargs)  # a new dict: filling in defaults is safe
        key = self._render(arguments)
        for name, default in self.optional:
            if name not in arguments:
                arguments[name] = default
        for name in self.injected:  # the framework's, not the call's: never its identity
            arguments.pop(name, None)
        return key, arguments

    def key(self, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> str:
        return self._render(self._bind(args, kwargs))

    def _render(self, arguments: Dict[str, Any]) -> str:
        src = self.template.source
        values = []
        for name in self.names:
            if name in arguments:
                value = arguments[name]
            else:
                value = self.defaults[name]
                if value is inspect.Parameter.empty:
                    raise EffectKeyError(
                        f"effect template {src!r}: no value for placeholder '{name}'; "
                        f"available: {', '.join(arguments) or '(none)'}"
                    )
            values.append(render_value(src, name, value))
        return self.template.render(values)


#: What :meth:`Gate.route` decides for a call: the key binder, the approval's time to live
#: (``approve`` only) and whether a committed duplicate replays its stored result.
# The binder, for an ``approve`` action the approval's time to live, whether a committed
# duplicate replays, and how many distinct people must grant an approval.
Route = Tuple["KeyBinder", Optional[timedelta], bool, int]


class Gate:
    """Per protected function: which key binder a call uses and whether it needs a person's
    approval, after the policy has its say.

    Templates: the decorator's wins over the policy's (with one warning per function when they
    differ); without one, the policy's applies; with neither, the call runs unreserved.
    Decisions: the policy's wins over the decorator's (with one warning when they differ). A
    ``deny`` refuses the call before anything is reserved; ``approve`` returns the approval's
    time to live with the binder. ``replay``: the policy's, where it states one, else the
    decorator's."""

    __slots__ = (
        "approval_ttl",
        "decision",
        "fn",
        "from_policy",
        "name",
        "own",
        "replay",
        "warned",
        "warned_decision",
        "warned_unreserved",
    )

    def __init__(
        self,
        name: str,
        fn: Callable[..., Any],
        template: Optional[_core.Template],
        decision: str = "allow",
        approval_ttl: Optional[timedelta] = None,
        replay: bool = False,
    ):
        self.name = name
        self.fn = fn
        self.own = None if template is None else KeyBinder(template, fn, name)
        self.decision = decision
        self.approval_ttl = approval_ttl
        self.replay = replay
        self.from_policy: Dict[str, KeyBinder] = {}
        self.warned = False
        self.warned_decision = False
        self.warned_unreserved = False

    def binder(self) -> Optional[KeyBinder]:
        route = self.route()
        return None if route is None else route[0]

    def _deny(self, where: str, policy: Optional[str]) -> ActionDenied:
        return ActionDenied(
            f"action {self.name!r} is denied by {where}; nothing was reserved or run",
            action=self.name,
            policy=policy,
        )

    def route(self) -> Optional[Route]:
        """The binder for this call, for an ``approve`` action the approval's time to live, and
        whether a committed duplicate replays its result; ``None``: the call runs
        unreserved."""
        policy = current_policy()
        entry = None if policy is None else policy.actions.get(self.name)
        if entry is None:
            if self.decision == "deny":
                raise self._deny("its decorator (decision='deny')", None)
            if self.own is None:
                self._unreserved(self.decision)
                self._warn_unreserved(None if policy is None else policy.path)
                return None
            ttl = self._ttl(None) if self.decision == "approve" else None
            return self.own, ttl, self.replay, 1
        assert policy is not None
        # The policy's decision wins where it states one; an entry that only gives a template
        # leaves the decorator's decision in force.
        decision = entry.decision if entry.decided else self.decision
        if decision == "deny":
            where = (
                f"the policy {policy.path} (line {entry.line})"
                if entry.decided
                else "its decorator (decision='deny')"
            )
            raise self._deny(where, policy.path if entry.decided else None)
        if (
            entry.decided
            and entry.decision != self.decision
            and not self.warned_decision
            and (self.decision != "allow")
        ):
            self.warned_decision = True
            warnings.warn(
                f"protect({self.name!r}): the decorator's decision {self.decision!r} differs "
                f"from the policy's {entry.decision!r} ({policy.path}, line {entry.line}); the "
                f"policy's is used",
                PolicyWarning,
                stacklevel=3,
            )
        ttl = self._ttl(entry.approval_ttl) if decision == "approve" else None
        replay = self.replay if entry.replay is None else entry.replay
        approvals = (getattr(entry, "approvals", None) or 1) if decision == "approve" else 1
        if self.own is not None:
            if entry.effect is not None and entry.effect != self.own.template.source:
                if not self.warned:
                    self.warned = True
                    warnings.warn(
                        f"protect({self.name!r}) on {self.own.qualname}: the decorator's effect "
                        f"template {self.own.template.source!r} differs from the policy's "
                        f"{entry.effect!r} ({policy.path}, line {entry.line}); "
                        f"the decorator's is used",
                        PolicyWarning,
                        stacklevel=3,
                    )
            return self.own, ttl, replay, approvals
        if entry.effect is None:
            self._unreserved(decision)
            return None
        binder = self.from_policy.get(entry.effect)
        if binder is None:
            binder = KeyBinder(_core.Template(entry.effect), self.fn, self.name)
            self.from_policy[entry.effect] = binder
        return binder, ttl, replay, approvals

    def _warn_unreserved(self, policy: Optional[str]) -> None:
        """Once per function: no ``effect=`` and no policy entry, so its calls run unreserved
        (a policy file missing from the working directory must not unprotect it silently).
        An entry that names the action without a template is a choice, and is not warned of."""
        if self.warned_unreserved:
            return
        self.warned_unreserved = True
        if policy is not None:
            where = f"the policy {policy} has no entry for it"
        else:
            path, named = policy_path()
            where = (
                f"no policy file was read (CTRLRUN_CONFIG names {path})"
                if named
                else f"no policy file was found: CTRLRUN_CONFIG is not set and {path} does not exist"
            )
        warnings.warn(
            f"protect({self.name!r}) on {getattr(self.fn, '__qualname__', self.fn)}: no effect "
            f"template on the decorator, and {where}; its calls run unreserved, never refused "
            f"as duplicates",
            PolicyWarning,
            stacklevel=4,
        )

    def _unreserved(self, decision: str) -> None:
        """No template anywhere: the call runs unreserved, which an ``approve`` action must
        never do (fail closed)."""
        if decision == "approve":
            raise InvalidArgument(
                f"action {self.name!r} needs approval, but no effect template is given (on the "
                f"decorator or in the policy): an approval is used with the reservation of its "
                f"effect key, so the call is refused; nothing was reserved or run"
            )
        return None

    def _ttl(self, from_policy: Optional[timedelta]) -> timedelta:
        from ctrlrun.store.approvals import DEFAULT_APPROVAL_TTL

        if from_policy is not None:
            return from_policy
        return self.approval_ttl if self.approval_ttl is not None else DEFAULT_APPROVAL_TTL

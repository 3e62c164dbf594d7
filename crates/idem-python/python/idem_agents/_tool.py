"""The ``tool`` decorator: a function becomes an idem tool definition.

The options are the Rust attribute's (``#[tool(...)]``) with the same
checks: an unknown class is refused with the closest word, retries are
refused on classes that are never retried, a key option on a ``read``.
"""

from __future__ import annotations

import difflib
import inspect
import re
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Awaitable, Callable, Dict, Generic, Optional, TypeVar, Union

from . import _native

CLASSES = ("read", "idempotent_write", "non_idempotent_write", "irreversible")

Duration = Union[float, int, timedelta, str]
"""Seconds, a ``timedelta``, or text: ``"250ms"``, ``"30s"``, ``"5m"``, ``"24h"``, ``"7d"``."""

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def seconds(value: Optional[Duration], what: str) -> Optional[float]:
    """``value`` in seconds (``None`` stays ``None``)."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool):
        raise TypeError(f"{what}: a duration, not a bool")
    if isinstance(value, (int, float)):
        return float(value)
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*", value)
    if not match:
        raise ValueError(f'{what}={value!r}: write "250ms", "30s", "5m", "24h" or "7d"')
    return float(match.group(1)) * _UNITS[match.group(2)]


@dataclass(frozen=True)
class Natural:
    """A natural key: the calls whose ``fields`` are equal (after their
    normalisers) within one ``window`` are one effect (find-or-create)."""

    fields: Dict[str, Optional[Callable[[Any], Any]]]
    window: Optional[float] = None

    def material(self, args: Dict[str, Any]) -> Dict[str, Any]:
        """The key material of ``args``: each field, normalised."""
        out: Dict[str, Any] = {}
        for name, normalise in self.fields.items():
            value = args.get(name)
            out[name] = normalise(value) if normalise is not None else value
        return out


@dataclass(frozen=True)
class Custom:
    """A custom key: ``function(args)`` returns the key material (text)."""

    function: Callable[[Dict[str, Any]], str]


def natural(*fields: str, window: Optional[Duration] = None, **normalised: Callable[[Any], Any]) -> Natural:
    """A natural key over argument ``fields``; ``name=function`` adds a
    field with its normaliser, as ``natural(fields(a, b = normalise))``
    in Rust."""
    spec: Dict[str, Optional[Callable[[Any], Any]]] = {f: None for f in fields}
    spec.update(normalised)
    if not spec:
        raise ValueError("a natural key names at least one argument field")
    return Natural(spec, seconds(window, "window"))


def custom(function: Callable[[Dict[str, Any]], str]) -> Custom:
    """A custom key: ``function(args)`` returns its material."""
    return Custom(function)


@dataclass(frozen=True)
class Applied:
    """A reconcile hook's answer: the effect took place; ``output`` is recorded."""

    output: Any


NOT_APPLIED = "not_applied"
"""A reconcile hook's answer: the effect did not take place; the call may run."""


def _model_type(func: Callable[..., Any]) -> Optional[type]:
    """The pydantic model the function's first parameter is annotated
    with, if any (string annotations are resolved in the function's
    globals and the names its body closes over)."""
    closure = dict(
        zip(func.__code__.co_freevars, (c.cell_contents for c in (func.__closure__ or ())))
    ) if hasattr(func, "__code__") else {}
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return None
    if not params:
        return None
    annotation = params[0].annotation
    if isinstance(annotation, str):
        try:
            annotation = eval(annotation, getattr(func, "__globals__", {}), closure)  # noqa: S307
        except Exception:
            return None
    if isinstance(annotation, type) and hasattr(annotation, "model_validate"):
        return annotation
    return None


def _takes_context(func: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return True
    return len(params) >= 2


def _jsonable(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    return value


R = TypeVar("R")


class Tool(Generic[R]):
    """A tool: its definition, and the function idem runs under it.

    Call it through an executor (``executor.call(tool, args, call_id=…)``):
    calling the function around idem is not offered.
    """

    def __init__(
        self,
        func: Callable[..., Any],
        definition: _native.ToolDefinition,
        *,
        key: Union[None, Natural, Custom],
        reconcile: Optional[Callable[..., Any]],
    ) -> None:
        self.func = func
        self.name: str = definition.name
        self.cls: str = definition.cls
        self.description: str = inspect.getdoc(func) or ""
        self.is_async = inspect.iscoroutinefunction(func)
        self.model = _model_type(func)
        self.key = key
        self._with_ctx = _takes_context(func)
        self.runner = self._make_runner(func, self.is_async, self._with_ctx)
        self.reconcile_runner: Optional[Callable[..., Any]] = None
        self.reconcile_is_async = False
        if reconcile is not None:
            self.reconcile_is_async = inspect.iscoroutinefunction(reconcile)
            self.reconcile_runner = self._make_reconcile(reconcile, self.reconcile_is_async)
        # What every call of the tool shares, handed to the native side once.
        self.definition = definition.bind(
            self.runner, self.is_async, self.reconcile_runner, self.reconcile_is_async
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            f"`{self.name}` is an idem tool: call it through an executor, "
            f"`executor.call({self.name}, args, call_id=...)`, so that a repeat "
            "is answered from its record instead of running again"
        )

    def __repr__(self) -> str:
        return f"<idem tool {self.name} ({self.cls})>"

    def _typed(self, args: Any) -> Any:
        """``args`` as the function takes them. They are the caller's own
        object, except for a call whose arguments an approver edited: then
        the edited JSON, which a model-typed tool validates first."""
        if self.model is not None and isinstance(args, dict):
            return self.model.model_validate(args)  # type: ignore[attr-defined]
        return args

    def _make_runner(self, func: Callable[..., Any], is_async: bool, with_ctx: bool) -> Callable[..., Any]:
        typed = self._typed
        if is_async:

            async def run_async(args: Any, ctx: Any) -> Any:
                args = typed(args)
                out = await (func(args, ctx) if with_ctx else func(args))
                return _jsonable(out)

            return run_async

        def run(args: Any, ctx: Any) -> Any:
            args = typed(args)
            return _jsonable(func(args, ctx) if with_ctx else func(args))

        return run

    def _make_reconcile(self, hook: Callable[..., Any], is_async: bool) -> Callable[..., Any]:
        typed = self._typed

        def answer(found: Any) -> Dict[str, Any]:
            if isinstance(found, Applied):
                return {"applied": _jsonable(found.output)}
            if found == NOT_APPLIED:
                return {"not_applied": True}
            return {"unknown": True}

        if is_async:

            async def run_async(args: Any, ctx: Any) -> Any:
                return answer(await hook(typed(args), ctx))

            return run_async

        def run(args: Any, ctx: Any) -> Any:
            return answer(hook(typed(args), ctx))

        return run

    def arguments(self, args: Any) -> "tuple[Any, Dict[str, Any]]":
        """``args`` as the function takes them and as JSON (their key's
        source). A dict for a model-typed tool is validated into the model
        first; nothing runs if it does not fit."""
        if type(args) is dict and self.model is None:
            return args, args
        from .errors import InvalidArguments

        if args is None:
            args = {}
        if self.model is not None and isinstance(args, dict):
            try:
                args = self.model.model_validate(args)  # type: ignore[attr-defined]
            except Exception as e:  # pydantic.ValidationError
                message = f"invalid arguments for tool `{self.name}`: {e}"
                raise InvalidArguments(
                    message,
                    content={"error": {"code": "invalid_arguments", "message": message}},
                ) from None
        json_args = _jsonable(args)
        if not isinstance(json_args, dict):
            message = (
                f"invalid arguments for tool `{self.name}`: the arguments must be a "
                f"dict or a pydantic model, not {type(args).__name__}"
            )
            raise InvalidArguments(
                message, content={"error": {"code": "invalid_arguments", "message": message}}
            )
        return args, json_args


F = TypeVar("F", bound=Callable[..., Any])


def tool(
    cls: str,
    *,
    name: Optional[str] = None,
    description: Optional[str] = None,
    key: Union[None, Natural, Custom] = None,
    ttl: Optional[Duration] = None,
    timeout: Optional[Duration] = None,
    max_attempts: Optional[int] = None,
    reconcile: Optional[Callable[..., Any]] = None,
    key_version: Optional[int] = None,
    store_args: bool = True,
) -> Callable[[Callable[..., Any]], Tool[Any]]:
    """Make a function an idem tool of class ``cls``: ``"read"``,
    ``"idempotent_write"``, ``"non_idempotent_write"`` or ``"irreversible"``.

    The function takes ``(args)`` or ``(args, ctx)``: ``args`` a dict (or
    the pydantic model its first parameter is annotated with), ``ctx`` the
    call's :class:`Context` (``ctx.key`` to pass downstream). It may be
    ``async def``. It returns JSON (dicts, lists, text, numbers) or a
    pydantic model.
    """
    if cls not in CLASSES:
        close = difflib.get_close_matches(str(cls), CLASSES, n=1)
        hint = f" (did you mean `{close[0]}`?)" if close else ""
        raise ValueError(f"unknown tool class `{cls}`{hint}: one of {', '.join(CLASSES)}")
    if cls == "read" and key is not None:
        raise TypeError("a `read` tool has no key: reads are free and never recorded")
    if cls == "read" and reconcile is not None:
        raise TypeError("a `read` tool has nothing to reconcile: it is never recorded")
    if max_attempts is not None and cls in ("non_idempotent_write", "irreversible"):
        raise TypeError(
            f"a `{cls}` tool is never retried (repeating it repeats the effect): "
            "remove max_attempts, or make the tool an idempotent_write"
        )
    if max_attempts is not None and max_attempts < 1:
        raise ValueError("max_attempts counts the first attempt: at least 1")
    if key is not None and not isinstance(key, (Natural, Custom)):
        raise TypeError("key: idem_agents.natural(...) or idem_agents.custom(function)")

    def wrap(func: Callable[..., Any]) -> Tool[Any]:
        definition = _native.ToolDefinition(
            name or func.__name__,
            description if description is not None else (inspect.getdoc(func) or ""),
            cls,
            key="natural" if isinstance(key, Natural) else "custom" if isinstance(key, Custom) else "default",
            natural_fields=list(key.fields) if isinstance(key, Natural) else None,
            natural_window=key.window if isinstance(key, Natural) else None,
            ttl=seconds(ttl, "ttl"),
            timeout=seconds(timeout, "timeout"),
            max_attempts=max_attempts,
            has_reconcile=reconcile is not None,
            key_version=key_version,
            store_args=store_args,
        )
        made: Tool[Any] = Tool(func, definition, key=key, reconcile=reconcile)
        fields = getattr(made.model, "model_fields", None)
        if isinstance(key, Natural) and fields is not None:
            unknown = [f for f in key.fields if f not in fields]
            if unknown:
                raise ValueError(
                    f"natural key of `{definition.name}`: no argument field `{unknown[0]}` "
                    f"in {made.model.__name__} (fields: {', '.join(fields)})"  # type: ignore[union-attr]
                )
        return made

    return wrap

"""The executor: opened on a store URL, it runs tools with the guarantees
of their class, through idem's Rust executor."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from . import _native
from ._tool import Custom, Duration, Natural, Tool, seconds

CallResult = _native.CallResult
"""A successful call: ``output``, ``deduplicated``, ``key``, ``attempts``, ``tool``, ``cls``."""

ApprovalFunction = Callable[[Dict[str, Any]], Tuple[str, str]]
"""Decides an irreversible call: given ``{"tool", "key", "namespace",
"call_id", "arguments"}``, returns ``("approved", approver)``,
``("denied", reason)`` or ``("pending", message)``."""


class Executor:
    """Runs tool calls on one store.

    ``store``: ``"sqlite://idem.db"`` (the default: a file beside the
    program, kept across restarts), ``"memory:"``, ``"redis://…"``,
    ``"rediss://…"``, ``"postgres://…"``. ``approvals`` decides
    ``irreversible`` calls: ``"pending"`` (a person decides later with
    ``idem approve`` or the inbox; the call raises
    :class:`~idem_agents.errors.ApprovalPending` until then), ``"deny"``, a
    list of tool names approved without asking, or a function.
    """

    def __init__(
        self,
        store: str = "sqlite://idem.db",
        *,
        namespace: Optional[str] = None,
        approvals: Union[None, str, List[str], ApprovalFunction] = None,
        lease: Optional[Duration] = None,
        ttl: Optional[Duration] = None,
        timeout: Optional[Duration] = None,
        reject_in_flight: bool = False,
        worker: Optional[str] = None,
        approval_wait: Optional[Duration] = None,
        _native_executor: Optional[_native.Executor] = None,
    ) -> None:
        if _native_executor is not None:
            self._native = _native_executor
            return
        self._native = _native.Executor(
            store,
            namespace=namespace,
            approvals=approvals,
            lease=seconds(lease, "lease"),
            ttl=seconds(ttl, "ttl"),
            timeout=seconds(timeout, "timeout"),
            reject_in_flight=reject_in_flight,
            worker=worker,
            approval_wait=seconds(approval_wait, "approval_wait"),
        )

    @property
    def store(self) -> str:
        """The store, described without its password."""
        return self._native.store

    @property
    def replaying(self) -> bool:
        """Whether this executor replays."""
        return self._native.replaying

    def replay(self) -> "Executor":
        """An executor on the same store that runs no side effect: writes
        answer from their records or raise
        :class:`~idem_agents.errors.NotRecorded`; reads run."""
        return Executor(_native_executor=self._native.replay())

    def __repr__(self) -> str:
        return f"Executor({self.store!r})"

    @staticmethod
    def _request(
        tool: Tool[Any],
        args: Any,
        call_id: Optional[str],
        run: Optional[str],
        step: int,
        namespace: Optional[str],
        reason: Optional[str],
        window: Optional[Duration],
        repeat: int,
    ) -> Tuple[Any, ...]:
        """What the native executor is asked to run, in the order its
        ``call`` takes it."""
        if not isinstance(tool, Tool):
            raise TypeError(f"not an idem tool: {tool!r} (decorate it with @idem_agents.tool)")
        args, json_args = tool.arguments(args)
        key = tool.key
        return (
            tool.definition,
            args,
            json_args,
            key.material(json_args) if isinstance(key, Natural) else None,
            key.function(json_args) if isinstance(key, Custom) else None,
            call_id,
            run,
            step,
            namespace,
            reason,
            None if window is None else seconds(window, "window"),
            repeat,
        )

    def call(
        self,
        tool: Tool[Any],
        args: Any = None,
        *,
        call_id: Optional[str] = None,
        run: Optional[str] = None,
        step: int = 0,
        namespace: Optional[str] = None,
        reason: Optional[str] = None,
        window: Optional[Duration] = None,
        repeat: int = 0,
    ) -> CallResult:
        """Call ``tool`` with ``args`` (a dict or a pydantic model) and wait.

        The key comes from ``call_id`` (the model's tool-call id), else
        ``run`` and ``step`` with the arguments, else the tool's natural or
        custom key, else — with ``window`` — the same arguments within the
        window are one effect (``repeat=n`` means an n-th identical one).
        A write with none of these is refused. A duplicate returns the
        first call's output with ``deduplicated=True``.
        """
        return self._native.call(self._request(tool, args, call_id, run, step, namespace, reason, window, repeat))

    async def acall(
        self,
        tool: Tool[Any],
        args: Any = None,
        *,
        call_id: Optional[str] = None,
        run: Optional[str] = None,
        step: int = 0,
        namespace: Optional[str] = None,
        reason: Optional[str] = None,
        window: Optional[Duration] = None,
        repeat: int = 0,
    ) -> CallResult:
        """:meth:`call` from asyncio: an ``async def`` tool runs on this
        event loop, a plain one on a worker thread."""
        request = self._request(tool, args, call_id, run, step, namespace, reason, window, repeat)
        result: CallResult = await self._native.acall(request)
        return result

"""idem for Python agents: tool calls executed at least once, effects
applied exactly once.

The executor, the stores, the keys and the approvals are idem's own
(Rust, through PyO3): a call made here and the same call made from Rust or
through ``idem proxy`` on one store are one record, listed by ``idem ls``
and approved with ``idem approve``.

    from idem_agents import Executor, tool

    @tool("idempotent_write")
    def send_email(args, ctx):
        return mailer.send(args["to"], args["body"], message_id=ctx.key)

    executor = Executor("sqlite://idem.db")
    executor.call(send_email, {"to": "a@example.com", "body": "Hi"}, call_id="call_1")
"""

from . import errors
from ._executor import ApprovalFunction, CallResult, Executor
from ._native import Context, KEY_VERSION
from ._tool import CLASSES, NOT_APPLIED, Applied, Custom, Duration, Natural, Tool, custom, natural, tool
from .errors import IdemError, ToolError
from .keys import canonical, derive_key, sub_key

__all__ = [
    "Applied",
    "ApprovalFunction",
    "CLASSES",
    "CallResult",
    "Context",
    "Custom",
    "Duration",
    "Executor",
    "IdemError",
    "KEY_VERSION",
    "NOT_APPLIED",
    "Natural",
    "Tool",
    "ToolError",
    "canonical",
    "custom",
    "derive_key",
    "errors",
    "natural",
    "sub_key",
    "tool",
]

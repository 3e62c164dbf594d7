"""idem's errors as exceptions: one class per error code.

Every exception raised by a call is an :class:`IdemError` carrying
``code`` (idem's machine-readable code, the same as Rust's ``ErrorCode``
and the MCP answers), ``message`` (the words a model should read: what
happened, whether anything ran, what to do next), ``key`` (where an
operator finds the record), ``deduplicated`` (the answer came from an
earlier call's record) and ``content`` (the JSON a dispatcher answers a
model with).

A tool signals how it failed by raising :class:`ToolError` (or one of
``ToolError.transient``/``ambiguous``/``permanent``); any other exception
from a tool is *ambiguous*: it says nothing about whether the effect took
place.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Type


class ToolError(Exception):
    """Raised by a tool to say what its failure means for the effect.

    ``kind`` is ``"transient"`` (known not applied: retried where the class
    allows, the key released), ``"ambiguous"`` (may have been applied) or
    ``"permanent"`` (recorded as the call's failed outcome).
    """

    idem_kind: str

    def __init__(
        self,
        message: str,
        kind: str = "permanent",
        *,
        retry_after: Optional[float] = None,
        details: Any = None,
    ) -> None:
        if kind not in ("transient", "ambiguous", "permanent"):
            raise ValueError(f"kind={kind!r}: transient, ambiguous or permanent")
        super().__init__(message)
        self.idem_kind = kind
        self.retry_after = retry_after
        self.details = details

    @classmethod
    def transient(cls, message: str, *, retry_after: Optional[float] = None) -> "ToolError":
        """Known not applied (refused, rate-limited): safe to retry."""
        return cls(message, "transient", retry_after=retry_after)

    @classmethod
    def ambiguous(cls, message: str) -> "ToolError":
        """May have been applied (a timeout after the request was sent)."""
        return cls(message, "ambiguous")

    @classmethod
    def permanent(cls, message: str, *, details: Any = None) -> "ToolError":
        """Definitely failed: recorded, and answered to repeats."""
        return cls(message, "permanent", details=details)


class IdemError(Exception):
    """A call that did not produce an output, for the reason ``code`` names."""

    code: str = "idem_error"

    def __init__(
        self,
        message: str,
        *,
        code: Optional[str] = None,
        key: Optional[str] = None,
        deduplicated: bool = False,
        content: Any = None,
        kind: Optional[str] = None,
        tool_message: Optional[str] = None,
        details: Any = None,
    ) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.key = key
        self.deduplicated = deduplicated
        self.content = content
        self.kind = kind
        self.tool_message = tool_message
        self.details = details


class ToolFailed(IdemError):
    """The tool ran and failed (``kind``, ``tool_message``, ``details``);
    ``deduplicated``: an earlier call under the key failed so."""

    code = "tool_error"


class InvalidKey(IdemError):
    """A call id, run id or key material that cannot make a key."""

    code = "invalid_key"


class StoreUnavailable(IdemError):
    """The store could not be reached: nothing ran (fail closed)."""

    code = "store_unavailable"


class Superseded(IdemError):
    """This call lost its key to a newer owner; it recorded nothing."""

    code = "superseded"


class KeyReused(IdemError, ValueError):
    """The key was used before with other arguments: nothing ran."""

    code = "key_reused"


class InFlight(IdemError):
    """Another call with the key is running (executor ``reject_in_flight``)."""

    code = "in_flight"


class OutcomeUnknown(IdemError):
    """An earlier call may or may not have taken effect: an operator
    settles it (``idem resolve``); it is never re-run."""

    code = "outcome_unknown"


class OutcomeNotRecorded(IdemError):
    """The tool ran but its outcome could not be recorded."""

    code = "outcome_not_recorded"


class ApprovalDenied(IdemError):
    """The irreversible call was denied; it did not run."""

    code = "approval_denied"


class ApprovalPending(IdemError):
    """The irreversible call awaits a person's decision (``idem approve``,
    the inbox); call again with the same key after it."""

    code = "approval_pending"


class ApprovalRequired(IdemError):
    """The irreversible call has no approval policy to ask."""

    code = "approval_required"


class NotRecorded(IdemError):
    """Replay: the write has no record, and replay runs nothing."""

    code = "not_recorded"


class KeyAwaitsOtherArguments(IdemError):
    """The key's pending approval was asked for other arguments."""

    code = "key_awaits_other_arguments"


class RecordedOutputMismatch(IdemError):
    """The recorded output does not fit the tool's output type."""

    code = "recorded_output_mismatch"


class InvalidArguments(IdemError, ValueError):
    """The arguments are not what the tool takes: nothing ran."""

    code = "invalid_arguments"


class OutputNotSerializable(IdemError):
    """The tool's output has no JSON form."""

    code = "output_not_serializable"


class UnknownTool(IdemError):
    """No tool of that name."""

    code = "unknown_tool"


class ArgumentsTooLarge(IdemError):
    """The arguments are larger than the limit: nothing ran."""

    code = "arguments_too_large"


def _by_code() -> Dict[str, Type[IdemError]]:
    """Each error class by its code."""
    return {cls.code: cls for cls in IdemError.__subclasses__()}


_BY_CODE = _by_code()


def _from_native(info: Dict[str, Any]) -> IdemError:
    """The exception of an error the native module reports."""
    cls = _BY_CODE.get(info["code"], IdemError)
    return cls(
        info["message"],
        code=info["code"],
        key=info.get("key"),
        deduplicated=bool(info.get("deduplicated")),
        content=info.get("content"),
        kind=info.get("kind"),
        tool_message=info.get("tool_message"),
        details=info.get("details"),
    )

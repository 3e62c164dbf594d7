"""Keys as idem derives them (docs/keys.md), byte for byte as in Rust."""

from __future__ import annotations

from typing import Any, Optional, Tuple

from . import _native


def canonical(args: Any) -> Tuple[str, str]:
    """``args``' canonical JSON (RFC 8785) and its fingerprint (SHA-256 hex).

    Key order, whitespace and number spelling (``1``, ``1.0``) do not
    change either; ``NaN``, infinities and non-string keys are refused.
    """
    return _native.canonical(args)


def derive_key(
    tool: str,
    source: str,
    *,
    version: int = 1,
    namespace: str = "default",
    call_id: Optional[str] = None,
    run_id: Optional[str] = None,
    step: int = 0,
    args: Any = None,
    fields: Any = None,
    window: Optional[int] = None,
    material: Optional[str] = None,
    seconds: Optional[int] = None,
    number: Optional[int] = None,
    repeat: int = 0,
) -> str:
    """The key of a call of ``tool`` in ``namespace``, from ``source``:
    ``"call"`` (``call_id``), ``"step"`` (``run_id``, ``step``, ``args``),
    ``"natural"`` (``fields``, ``window``: the window's number),
    ``"custom"`` (``material``) or ``"window"`` (``seconds``, ``number``,
    ``repeat``, ``args``)."""
    parts = dict(locals())
    del parts["tool"], parts["source"]
    return _native.derive(tool, source, **parts)


def sub_key(key: str, label: str) -> str:
    """The sub-key ``label`` of ``key`` (as ``ctx.sub_key(label)``)."""
    return _native.sub_key(key, label)

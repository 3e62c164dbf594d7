"""The published key vectors (docs/keys.md) from Python: arguments parsed
by Python's own json module, canonicalised and keyed by the Rust side, and
the key of a real call is the documented derivation's."""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List

import pytest

import idem_agents as idem
from conftest import WORKSPACE


def vectors() -> List[Dict[str, Any]]:
    text = (WORKSPACE / "docs" / "keys.md").read_text()
    block = re.search(r"```json\n(.*?)```", text, re.S)
    assert block, "docs/keys.md has a ```json block of vectors"
    found: List[Dict[str, Any]] = json.loads(block.group(1))
    assert len(found) >= 8, "the document promises at least 8 vectors"
    return found


@pytest.mark.parametrize("vector", vectors(), ids=lambda v: v["name"])
def test_every_published_vector_reproduces_from_python(vector: Dict[str, Any]) -> None:
    if "sub_key_of" in vector:
        assert idem.sub_key(vector["sub_key_of"], vector["label"]) == vector["key"]
        return
    args = json.loads(vector["arguments"]) if "arguments" in vector else None
    if args is not None:
        text, fingerprint = idem.canonical(args)
        assert text == vector["canonical"]
        assert fingerprint == vector["fingerprint"]
    source = vector["source"]
    key = idem.derive_key(
        vector["tool"],
        source,
        version=vector["version"],
        namespace=vector["namespace"],
        call_id=vector.get("call_id"),
        run_id=vector.get("run_id"),
        step=vector.get("step") or 0,
        args=args,
        fields=vector.get("fields"),
        window=vector.get("window") if source == "natural" else None,
        material=vector.get("material"),
        seconds=vector.get("window_seconds"),
        number=vector.get("window") if source == "window" else None,
        repeat=vector.get("repeat") or 0,
    )
    assert key == vector["key"], vector["name"]


def test_a_calls_key_is_the_documented_call_id_key() -> None:
    ex = idem.Executor("memory:")

    @idem.tool("idempotent_write", name="send_email")
    def send(args: Dict[str, Any]) -> bool:
        return True

    vector = next(v for v in vectors() if v["name"] == "call id (OpenAI)")
    result = ex.call(send, {"to": "a@example.com"}, call_id=vector["call_id"])
    assert result.key == vector["key"]


def test_key_order_and_number_spelling_do_not_change_the_key() -> None:
    a = idem.canonical({"amount": 10, "currency": "EUR"})
    assert a == idem.canonical({"currency": "EUR", "amount": 10.0})
    assert a[0] == '{"amount":10,"currency":"EUR"}'
    assert a != idem.canonical({"amount": 11, "currency": "EUR"})

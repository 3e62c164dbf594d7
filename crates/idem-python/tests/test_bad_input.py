"""Bad input gets idem's typed error, and nothing runs."""

from __future__ import annotations

import json
import math
from typing import Any, Dict, List

import pytest

import idem_agents as idem
from idem_agents import errors
from idem_agents.keys import derive_key


@pytest.fixture
def runs() -> List[Any]:
    return []


@pytest.fixture
def write(runs: List[Any]) -> idem.Tool[Any]:
    @idem.tool("idempotent_write")
    def save(args: Dict[str, Any]) -> bool:
        runs.append(args)
        return True

    return save


@pytest.mark.parametrize(
    "args, says",
    [
        ({"amount": math.nan}, "NaN"),
        ({"amount": math.inf}, "inf"),
        ({"when": object()}, "object has no JSON form"),
        ({1: "a"}, "JSON keys are strings"),
        ({"big": 10**400}, "beyond the range of a JSON number"),
        ({"nested": {"set": {1, 2}}}, "args.nested.set"),
        ("not a dict", "must be a dict"),
    ],
)
def test_arguments_json_cannot_hold_are_invalid_arguments_and_nothing_runs(
    store_url: str, write: idem.Tool[Any], runs: List[Any], args: Any, says: str
) -> None:
    ex = idem.Executor(store_url)
    with pytest.raises(errors.InvalidArguments) as raised:
        ex.call(write, args, call_id="bad-1")
    assert raised.value.code == "invalid_arguments"
    assert says in raised.value.message
    assert "nothing ran" in raised.value.message or "must be a dict" in raised.value.message
    assert raised.value.content["error"]["code"] == "invalid_arguments"
    assert runs == []


def test_arguments_over_64_kib_are_too_large_as_from_a_model_and_nothing_runs(
    store_url: str, write: idem.Tool[Any], runs: List[Any]
) -> None:
    ex = idem.Executor(store_url)
    # 65,536 bytes of JSON text: `{"text":"…"}` is 11 bytes around the string.
    at_limit = {"text": "x" * (64 * 1024 - 11)}
    assert ex.call(write, at_limit, call_id="size-1").output is True
    with pytest.raises(errors.ArgumentsTooLarge) as raised:
        ex.call(write, {"text": "x" * (64 * 1024 - 10)}, call_id="size-2")
    assert raised.value.code == "arguments_too_large"
    assert raised.value.message == "arguments of `save` are 65537 bytes; the limit is 65536 bytes; nothing ran"
    assert len(runs) == 1


def test_numbers_are_read_as_the_dispatcher_reads_the_same_json_text(write: idem.Tool[Any]) -> None:
    ex = idem.Executor("memory:")
    # An integer beyond 64 bits is the double its digits are as JSON text,
    # and an integral float the integer: one key with the text's.
    big = ex.call(write, {"big": 2**70, "n": 1000.0}, run="numbers", step=1)
    text = json.loads('{"big": 1180591620717411303424, "n": 1e3}')
    assert text == {"big": 2.0**70, "n": 1000.0}
    again = ex.call(write, text, run="numbers", step=1)
    assert again.deduplicated and again.key == big.key
    assert big.key == derive_key("save", "step", run_id="numbers", step=1, args={"big": 2.0**70, "n": 1000})


def test_a_key_reused_with_other_arguments_is_refused_and_nothing_runs(
    store_url: str, write: idem.Tool[Any], runs: List[Any]
) -> None:
    ex = idem.Executor(store_url)
    ex.call(write, {"amount": 1}, call_id="reuse-1")
    with pytest.raises(errors.KeyReused) as raised:
        ex.call(write, {"amount": 2}, call_id="reuse-1")
    assert raised.value.code == "key_reused"
    assert "nothing ran" in raised.value.message
    assert raised.value.key is not None
    assert runs == [{"amount": 1}]


def test_an_empty_or_oversized_call_id_is_an_invalid_key(
    store_url: str, write: idem.Tool[Any], runs: List[Any]
) -> None:
    ex = idem.Executor(store_url)
    for call_id in ("", "x" * 10_000):
        with pytest.raises(errors.InvalidKey):
            ex.call(write, {"amount": 1}, call_id=call_id)
    assert runs == []


def test_an_output_json_cannot_hold_is_refused_as_unknown_not_recorded_as_done(store_url: str) -> None:
    ex = idem.Executor(store_url)

    @idem.tool("non_idempotent_write")
    def odd(args: Dict[str, Any]) -> Any:
        return {"value": math.nan}

    with pytest.raises(errors.IdemError) as raised:
        ex.call(odd, {}, call_id="odd-1")
    assert "cannot be recorded" in raised.value.message
    with pytest.raises(errors.OutcomeUnknown):
        ex.call(odd, {}, call_id="odd-1")


def test_a_store_that_cannot_be_reached_is_store_unavailable() -> None:
    with pytest.raises(errors.StoreUnavailable) as raised:
        idem.Executor("redis://:secret@127.0.0.1:1/")
    assert "secret" not in raised.value.message
    with pytest.raises(errors.StoreUnavailable, match="unknown store URL scheme"):
        idem.Executor("mongodb://db")


def test_calling_the_function_around_idem_is_refused(write: idem.Tool[Any]) -> None:
    with pytest.raises(TypeError, match="through an executor"):
        write({"amount": 1})

"""Bad input gets idem's typed error, and nothing runs."""

from __future__ import annotations

import math
from typing import Any, Dict, List

import pytest

import idem_agents as idem
from idem_agents import errors


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
        ({"big": 2**70}, "does not fit in 64 bits"),
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

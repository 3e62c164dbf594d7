"""A plain function called with `call` runs inline: on the calling thread,
inside the executor's call, with the lease kept renewed while it runs."""

from __future__ import annotations

import pathlib
import threading
import time
from typing import Any, Dict, List

import pytest

import idem_agents as idem
from idem_agents import errors


def test_a_plain_function_runs_on_the_calling_thread(store_url: str) -> None:
    threads: List[int] = []

    @idem.tool("idempotent_write", name="inline_write")
    def write(args: Dict[str, Any]) -> int:
        threads.append(threading.get_ident())
        return int(args["n"])

    @idem.tool("idempotent_write", name="timed_write", timeout="5s")
    def timed(args: Dict[str, Any]) -> int:
        threads.append(threading.get_ident())
        return int(args["n"])

    ex = idem.Executor(store_url)
    assert ex.call(write, {"n": 1}, call_id="inline-1").output == 1
    assert ex.call(write, {"n": 1}, call_id="inline-1").deduplicated
    # A tool with a timeout of its own runs on a worker thread, where the
    # timeout can give up on it.
    assert ex.call(timed, {"n": 2}, call_id="inline-2").output == 2
    assert threads[0] == threading.get_ident()
    assert threads[1] != threading.get_ident()


def test_a_tool_may_call_another_tool_and_open_an_executor_inline(store_url: str) -> None:
    ex = idem.Executor(store_url)
    runs: List[str] = []

    @idem.tool("idempotent_write", name="inner_write")
    def inner(args: Dict[str, Any]) -> int:
        runs.append("inner")
        return int(args["n"]) * 2

    @idem.tool("idempotent_write", name="outer_write")
    def outer(args: Dict[str, Any], ctx: idem.Context) -> Dict[str, Any]:
        runs.append("outer")
        # Waits inside the outer call's wait, on the same thread.
        nested = idem.Executor("memory:").call(inner, args, call_id="nested-1").output
        again = ex.call(inner, args, call_id=f"{ctx.key}-inner")
        return {"nested": nested, "inner": again.output}

    first = ex.call(outer, {"n": 21}, call_id="outer-1")
    assert first.output == {"nested": 42, "inner": 42}
    assert ex.call(outer, {"n": 21}, call_id="outer-1").deduplicated
    assert runs == ["outer", "inner", "inner"]


def test_a_function_running_past_its_lease_keeps_its_key(tmp_path: pathlib.Path) -> None:
    store = f"sqlite://{tmp_path}/idem.db"
    runs: List[float] = []
    other: Dict[str, Any] = {}

    @idem.tool("non_idempotent_write", name="slow_send")
    def slow_send(args: Dict[str, Any]) -> Dict[str, bool]:
        runs.append(time.monotonic())
        time.sleep(1.2)  # four leases
        return {"sent": True}

    def meanwhile() -> None:
        time.sleep(0.8)  # past two leases: without renewals, free to take over
        try:
            idem.Executor(store, lease=0.3, reject_in_flight=True).call(slow_send, {}, call_id="slow-1")
        except errors.IdemError as e:
            other["error"] = e

    helper = threading.Thread(target=meanwhile)
    helper.start()
    done = idem.Executor(store, lease=0.3).call(slow_send, {}, call_id="slow-1")
    helper.join(timeout=10)
    assert done.output == {"sent": True} and not done.deduplicated
    assert isinstance(other.get("error"), errors.InFlight), other
    assert len(runs) == 1
    again = idem.Executor(store).call(slow_send, {}, call_id="slow-1")
    assert again.deduplicated and again.output == {"sent": True}
    assert len(runs) == 1


@pytest.mark.parametrize("cls", ["read", "idempotent_write"])
def test_an_exception_of_an_inline_function_is_the_call_s_error(cls: str) -> None:
    @idem.tool(cls, name=f"failing_{cls}")
    def failing(args: Dict[str, Any]) -> None:
        raise idem.ToolError.permanent("no such account")

    with pytest.raises(errors.ToolFailed, match="no such account"):
        idem.Executor("memory:").call(failing, {}, call_id="fail-1")

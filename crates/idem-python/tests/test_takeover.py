"""A Python worker SIGKILLed in the middle of a call, and another process
taking the call over: an idempotent_write is re-run with the same key; a
non_idempotent_write is never re-run (its outcome is unknown until an
operator or its reconcile hook settles it)."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

import pytest

import idem_agents as idem
from conftest import unavailable
from idem_agents import errors

WORKER = pathlib.Path(__file__).with_name("worker.py")


def kill_mid_call(store: str, cls: str, call_id: str, tmp: pathlib.Path) -> str:
    """Start the worker, wait until it is inside the tool, SIGKILL it;
    the key it held."""
    marker = tmp / f"{call_id}.started"
    worker = subprocess.Popen([sys.executable, str(WORKER), store, cls, call_id, str(marker)])
    deadline = time.monotonic() + 30
    while not marker.exists() or not marker.read_text():
        assert worker.poll() is None, "the worker died before the call started"
        assert time.monotonic() < deadline, "the worker never reached the tool"
        time.sleep(0.02)
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait(timeout=10)
    return marker.read_text()


def stores(tmp: pathlib.Path, postgres_url: Optional[str], kind: str) -> str:
    if kind == "sqlite":
        return f"sqlite://{tmp}/idem.db"
    if postgres_url is None:
        unavailable("the postgres server (IDEM_TEST_POSTGRES_URL)")
    assert postgres_url is not None
    return postgres_url


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_an_idempotent_write_of_a_killed_worker_is_taken_over_with_its_key(
    tmp_path: pathlib.Path, postgres_url: Optional[str], kind: str
) -> None:
    store = stores(tmp_path, postgres_url, kind)
    held = kill_mid_call(store, "idempotent_write", "crash-1", tmp_path)
    ex = idem.Executor(store, lease="1s")
    keys: List[str] = []

    @idem.tool("idempotent_write", name="book_room")
    def book_room(args: Dict[str, Any], ctx: idem.Context) -> str:
        keys.append(ctx.key or "")
        return "booked"

    started = time.monotonic()
    result = ex.call(book_room, {"room": 12}, call_id="crash-1")
    assert result.output == "booked" and not result.deduplicated
    assert keys == [held], "re-run with the same key"
    assert time.monotonic() - started < 20
    assert ex.call(book_room, {"room": 12}, call_id="crash-1").deduplicated


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_non_idempotent_write_of_a_killed_worker_is_never_re_run(
    tmp_path: pathlib.Path, postgres_url: Optional[str], kind: str
) -> None:
    store = stores(tmp_path, postgres_url, kind)
    held = kill_mid_call(store, "non_idempotent_write", "crash-2", tmp_path)
    ex = idem.Executor(store, lease="1s")

    @idem.tool("non_idempotent_write", name="book_room", timeout="3s")
    def book_room(args: Dict[str, Any]) -> str:
        raise AssertionError("a started non-idempotent call must never run again")

    with pytest.raises(errors.OutcomeUnknown) as raised:
        ex.call(book_room, {"room": 12}, call_id="crash-2")
    assert raised.value.key == held


def test_a_reconcile_hook_settles_the_killed_workers_call(tmp_path: pathlib.Path) -> None:
    store = f"sqlite://{tmp_path}/idem.db"
    held = kill_mid_call(store, "non_idempotent_write", "crash-3", tmp_path)
    ex = idem.Executor(store, lease="1s")
    asked: List[Optional[str]] = []

    def look_up(args: Dict[str, Any], ctx: idem.Context) -> Any:
        asked.append(ctx.key)
        return idem.Applied({"booking": "found in the provider's log"})

    @idem.tool("non_idempotent_write", name="book_room", timeout="3s", reconcile=look_up)
    def book_room(args: Dict[str, Any]) -> str:
        raise AssertionError("reconciled as applied: must not run")

    result = ex.call(book_room, {"room": 12}, call_id="crash-3")
    assert result.output == {"booking": "found in the provider's log"}
    assert asked == [held]

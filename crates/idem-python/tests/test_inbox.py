"""A pending approval of a Python call decided in the approval inbox
(`idem serve`, its JSON API with an approver's token): the next call with
the key runs the tool once, and the record names the approver."""

from __future__ import annotations

import json
import pathlib
import socket
import subprocess
import time
import urllib.request
from typing import Any, Dict, List

import pytest

import idem_agents as idem
from idem_agents import errors


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def api(port: int, token: str, path: str, body: Any = None) -> Any:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="GET" if body is None else "POST",
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


def test_a_python_call_awaiting_approval_is_approved_in_the_inbox(idem_bin: str, tmp_path: pathlib.Path) -> None:
    store = f"sqlite://{tmp_path}/idem.db"
    ex = idem.Executor(store, approvals="pending")
    runs: List[int] = []

    @idem.tool("irreversible")
    def refund(args: Dict[str, Any]) -> str:
        runs.append(args["cents"])
        return "refunded"

    with pytest.raises(errors.ApprovalPending) as pending:
        ex.call(refund, {"cents": 900}, call_id="refund-1")
    key = pending.value.key
    assert key is not None

    made = subprocess.run([idem_bin, "approver", "token", "ticket-bot"], capture_output=True, text=True, timeout=30)
    assert made.returncode == 0, made.stderr
    token = next(w for w in made.stderr.split() if len(w) >= 40)
    approvers = tmp_path / "approvers.toml"
    approvers.write_text(made.stdout)
    port = free_port()
    serve = subprocess.Popen(
        [idem_bin, "--store", store, "serve", "--approvers", str(approvers), "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                inbox = api(port, token, "/api/inbox")
                break
            except OSError:
                assert serve.poll() is None, serve.stderr.read() if serve.stderr else ""
                assert time.monotonic() < deadline, "idem serve did not start"
                time.sleep(0.1)
        (item,) = [i for i in inbox["items"] if i["key"] == key]
        assert item["tool"] == "refund" and item["waits_for"] == "awaiting_approval"
        done = api(port, token, f"/api/records/{key}/approve", {"version": item["version"], "note": "OPS-7"})
        assert done["by"] == "ticket-bot" and done["done"] == "approved"
    finally:
        serve.terminate()
        serve.wait(timeout=30)

    assert ex.call(refund, {"cents": 900}, call_id="refund-1").output == "refunded"
    assert ex.call(refund, {"cents": 900}, call_id="refund-1").deduplicated
    assert runs == [900]

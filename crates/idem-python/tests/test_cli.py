"""One record space across languages: a call made from Python is listed by
`idem ls`, shown by `idem show`, approved by `idem approve`, and answers
the same call made from Rust (tests/pytest.rs makes it, before and after)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
from typing import Any, Dict, List

import pytest
from pydantic import BaseModel

import idem_agents as idem
from conftest import unavailable
from idem_agents import errors


def idem_cli(idem_bin: str, store: str, *args: str) -> Any:
    out = subprocess.run(
        [idem_bin, "--store", store, "--json", *args], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout) if out.stdout.strip() else None


def test_a_python_call_is_listed_and_shown_by_idem(idem_bin: str, tmp_path: pathlib.Path) -> None:
    store = f"sqlite://{tmp_path}/idem.db"
    ex = idem.Executor(store)

    @idem.tool("non_idempotent_write")
    def send_invoice(args: Dict[str, Any]) -> Dict[str, Any]:
        return {"invoice": "inv-1"}

    result = ex.call(send_invoice, {"customer": "c-1", "cents": 990}, call_id="call_inv")
    listed = idem_cli(idem_bin, store, "ls")
    text = json.dumps(listed)
    assert result.key in text and "send_invoice" in text
    shown = idem_cli(idem_bin, store, "show", result.key)
    shown_text = json.dumps(shown)
    assert "inv-1" in shown_text and "call_inv" in shown_text and "990" in shown_text


def test_an_irreversible_python_call_waits_for_idem_approve_and_runs_once(
    idem_bin: str, tmp_path: pathlib.Path
) -> None:
    store = f"sqlite://{tmp_path}/idem.db"
    ex = idem.Executor(store, approvals="pending")
    runs: List[int] = []

    @idem.tool("irreversible")
    def close_account(args: Dict[str, Any]) -> str:
        runs.append(args["id"])
        return "closed"

    with pytest.raises(errors.ApprovalPending) as pending:
        ex.call(close_account, {"id": 4}, call_id="close-4")
    key = pending.value.key
    assert key is not None and runs == []
    with pytest.raises(errors.ApprovalPending):
        ex.call(close_account, {"id": 4}, call_id="close-4")
    assert "awaiting" in json.dumps(idem_cli(idem_bin, store, "ls")).lower() or runs == []

    idem_cli(idem_bin, store, "approve", key, "--by", "ada")
    assert ex.call(close_account, {"id": 4}, call_id="close-4").output == "closed"
    assert ex.call(close_account, {"id": 4}, call_id="close-4").deduplicated
    assert runs == [4]
    assert "ada" in json.dumps(idem_cli(idem_bin, store, "show", key))


def test_an_edit_by_idem_approve_runs_the_edited_arguments_once_and_says_so(
    idem_bin: str, tmp_path: pathlib.Path
) -> None:
    store = f"sqlite://{tmp_path}/idem.db"
    ex, runs = idem.Executor(store, approvals="pending"), []

    @idem.tool("irreversible")
    def refund(args: Dict[str, Any]) -> int:
        cents = int(args["cents"])
        runs.append(cents)
        return cents

    with pytest.raises(errors.ApprovalPending) as pending:
        ex.call(refund, {"cents": 9000}, call_id="refund-1")
    key = pending.value.key or ""
    idem_cli(idem_bin, store, "approve", key, "--by", "ada", "--edit-args", '{"cents": 4500}')
    for _ in range(2):
        result = ex.call(refund, {"cents": 9000}, call_id="refund-1")
        assert result.output == 4500
        assert result.edited == {"by": "ada", "original_key": key, "arguments": {"cents": 4500}}
        assert result.key != key
    assert runs == [4500]

    # A model-typed tool gets the edited arguments validated into its model.
    class Payout(BaseModel):
        cents: int

    @idem.tool("irreversible")
    def payout(args: Payout) -> int:
        assert isinstance(args, Payout)
        runs.append(args.cents)
        return args.cents

    with pytest.raises(errors.ApprovalPending) as pending:
        ex.call(payout, Payout(cents=700), call_id="payout-1")
    key = pending.value.key or ""
    idem_cli(idem_bin, store, "approve", key, "--by", "ada", "--edit-args", '{"cents": 70}')
    assert ex.call(payout, Payout(cents=700), call_id="payout-1").output == 70
    assert runs == [4500, 70]


def test_a_python_denial_by_idem_deny_is_answered_to_every_repeat(idem_bin: str, tmp_path: pathlib.Path) -> None:
    store = f"sqlite://{tmp_path}/idem.db"
    ex = idem.Executor(store, approvals="pending")

    @idem.tool("irreversible")
    def wipe(args: Dict[str, Any]) -> str:
        raise AssertionError("denied: must not run")

    with pytest.raises(errors.ApprovalPending) as pending:
        ex.call(wipe, {}, call_id="wipe-1")
    idem_cli(idem_bin, store, "deny", pending.value.key or "", "--by", "bob", "--reason", "not today")
    with pytest.raises(errors.ApprovalDenied, match="not today"):
        ex.call(wipe, {}, call_id="wipe-1")


@pytest.fixture
def shared_db() -> str:
    path = os.environ.get("IDEM_TEST_SHARED_DB")
    if not path:
        unavailable("the store the Rust driver shares (IDEM_TEST_SHARED_DB: run through `cargo test -p idem-python`)")
    assert path is not None
    return f"sqlite://{path}"


@idem.tool("non_idempotent_write", name="create_ticket")
def create_ticket(args: Dict[str, Any]) -> Dict[str, Any]:
    return {"ticket": f"python-{args['customer']}"}


def test_a_call_made_from_rust_answers_the_same_call_from_python(shared_db: str) -> None:
    ex = idem.Executor(shared_db)
    args = {"customer": "c-7", "subject": "refund"}
    from_rust = ex.call(create_ticket, args, call_id="rust-1")
    assert from_rust.deduplicated
    assert from_rust.output == {"ticket": "rust-c-7"}
    with pytest.raises(errors.KeyReused):
        ex.call(create_ticket, {"customer": "c-8", "subject": "refund"}, call_id="rust-1")
    # The call tests/pytest.rs makes again from Rust after this.
    made = ex.call(create_ticket, args, call_id="python-1")
    assert not made.deduplicated and made.output == {"ticket": "python-c-7"}

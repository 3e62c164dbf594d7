"""Each class's rules, from Python, on every store: reads run without a
record; an idempotent_write is retried with the same key; a
non_idempotent_write is never retried and an unknown outcome is refused;
an irreversible call runs only under an approval, once."""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List

import pytest

import idem_agents as idem
from idem_agents import errors


def test_a_read_runs_every_time_and_records_nothing(store_url: str) -> None:
    ex = idem.Executor(store_url)
    runs: List[int] = []

    @idem.tool("read")
    def balance(args: Dict[str, Any], ctx: idem.Context) -> Dict[str, Any]:
        runs.append(1)
        assert ctx.key is None
        return {"balance": 10}

    first = ex.call(balance, {"account": "a"}, call_id="c1")
    second = ex.call(balance, {"account": "a"}, call_id="c1")
    assert len(runs) == 2
    assert first.key is None and not second.deduplicated


def test_the_model_calls_send_email_twice_with_one_call_id_and_one_email_is_sent(store_url: str) -> None:
    ex = idem.Executor(store_url)
    sent: List[str] = []

    @idem.tool("idempotent_write")
    def send_email(args: Dict[str, Any], ctx: idem.Context) -> Dict[str, Any]:
        sent.append(args["to"])
        return {"message_id": f"<{ctx.key}@mail>"}

    first = ex.call(send_email, {"to": "a@example.com"}, call_id="call_1")
    second = ex.call(send_email, {"to": "a@example.com"}, call_id="call_1")
    assert sent == ["a@example.com"]
    assert not first.deduplicated and second.deduplicated
    assert second.output == first.output and first.key == second.key
    assert first.output["message_id"] == f"<{first.key}@mail>"


def test_an_idempotent_write_is_retried_with_the_same_key_after_a_transient_error(store_url: str) -> None:
    ex = idem.Executor(store_url)
    keys: List[str] = []

    @idem.tool("idempotent_write", max_attempts=3)
    def charge(args: Dict[str, Any], ctx: idem.Context) -> str:
        keys.append(ctx.key)
        if ctx.attempt < 3:
            raise idem.ToolError.transient("gateway busy")
        return "charged"

    result = ex.call(charge, {"cents": 100}, run="run-1", step=1)
    assert result.output == "charged" and result.attempts == 3
    assert len(set(keys)) == 1 and len(keys) == 3


def test_a_non_idempotent_write_is_never_retried_and_its_unknown_outcome_is_refused(store_url: str) -> None:
    ex = idem.Executor(store_url)
    runs: List[int] = []

    @idem.tool("non_idempotent_write")
    def post_payment(args: Dict[str, Any], ctx: idem.Context) -> str:
        runs.append(1)
        raise TimeoutError("the bank did not answer")

    with pytest.raises(errors.IdemError) as first:
        ex.call(post_payment, {"cents": 100}, call_id="pay-1")
    assert runs == [1]
    assert first.value.code in ("outcome_unknown", "tool_error")
    with pytest.raises(errors.OutcomeUnknown) as again:
        ex.call(post_payment, {"cents": 100}, call_id="pay-1")
    assert runs == [1], "an unknown outcome is never re-run"
    assert again.value.key == first.value.key
    assert "operator" in again.value.message or "idem" in again.value.message


def test_retries_of_a_class_never_retried_are_refused_at_definition() -> None:
    with pytest.raises(TypeError, match="never retried"):
        idem.tool("non_idempotent_write", max_attempts=3)
    with pytest.raises(TypeError, match="never retried"):
        idem.tool("irreversible", max_attempts=2)
    with pytest.raises(TypeError, match="no key"):
        idem.tool("read", key=idem.natural("id"))
    with pytest.raises(ValueError, match="did you mean `idempotent_write`"):
        idem.tool("idempotent_wrte")


def test_a_permanent_failure_is_recorded_and_answered_to_the_repeat(store_url: str) -> None:
    ex = idem.Executor(store_url)
    runs: List[int] = []

    @idem.tool("non_idempotent_write")
    def create_user(args: Dict[str, Any]) -> str:
        runs.append(1)
        raise idem.ToolError.permanent("the name is taken", details={"name": args["name"]})

    for expect_dedup in (False, True):
        with pytest.raises(errors.ToolFailed) as failed:
            ex.call(create_user, {"name": "ada"}, call_id="u-1")
        assert failed.value.deduplicated is expect_dedup
        assert failed.value.kind == "permanent"
        assert failed.value.tool_message == "the name is taken"
        assert failed.value.details == {"name": "ada"}
        assert failed.value.content["error"]["code"] == "tool_error"
    assert runs == [1]


def test_an_irreversible_call_runs_once_under_an_approval(store_url: str) -> None:
    asked: List[Dict[str, Any]] = []

    def approve(request: Dict[str, Any]) -> "tuple[str, str]":
        asked.append(request)
        return ("approved", "alice") if request["arguments"]["id"] == 7 else ("denied", "not that one")

    ex = idem.Executor(store_url, approvals=approve)
    deleted: List[int] = []

    @idem.tool("irreversible")
    def delete_account(args: Dict[str, Any]) -> str:
        deleted.append(args["id"])
        return "deleted"

    assert ex.call(delete_account, {"id": 7}, call_id="d-1").output == "deleted"
    assert ex.call(delete_account, {"id": 7}, call_id="d-1").deduplicated
    with pytest.raises(errors.ApprovalDenied, match="not that one"):
        ex.call(delete_account, {"id": 8}, call_id="d-2")
    assert deleted == [7] and len(asked) == 2


def test_an_irreversible_call_without_a_policy_does_not_run(store_url: str) -> None:
    ex = idem.Executor(store_url, approvals="deny")

    @idem.tool("irreversible")
    def wipe(args: Dict[str, Any]) -> str:
        raise AssertionError("must not run")

    with pytest.raises(errors.ApprovalDenied):
        ex.call(wipe, {}, call_id="w-1")


def test_a_natural_key_finds_the_ticket_created_with_other_wording(store_url: str) -> None:
    ex = idem.Executor(store_url)
    created: List[str] = []

    @idem.tool(
        "non_idempotent_write",
        key=idem.natural("customer", subject=lambda s: " ".join(s.lower().split()), window="24h"),
    )
    def create_ticket(args: Dict[str, Any]) -> Dict[str, Any]:
        created.append(args["body"])
        return {"ticket": len(created)}

    first = ex.call(create_ticket, {"customer": "c-1", "subject": "Refund  please", "body": "a"})
    second = ex.call(create_ticket, {"customer": "c-1", "subject": "refund please", "body": "b"})
    other = ex.call(create_ticket, {"customer": "c-2", "subject": "refund please", "body": "c"})
    assert created == ["a", "c"]
    assert second.deduplicated and second.output == first.output == {"ticket": 1}
    assert other.output == {"ticket": 2}


def test_a_write_without_any_key_source_is_refused_and_a_repeat_window_keys_it(store_url: str) -> None:
    ex = idem.Executor(store_url)
    runs: List[int] = []

    @idem.tool("idempotent_write")
    def set_status(args: Dict[str, Any]) -> str:
        runs.append(1)
        return args["status"]

    with pytest.raises(errors.IdemError):
        ex.call(set_status, {"status": "open"})
    assert runs == []
    ex.call(set_status, {"status": "open"}, window=600)
    assert ex.call(set_status, {"status": "open"}, window=600).deduplicated
    ex.call(set_status, {"status": "closed"}, window=600)
    ex.call(set_status, {"status": "open"}, window=600)
    assert len(runs) == 3, "open, closed, open: three effects"


def test_the_context_names_the_run_step_key_and_sub_keys(store_url: str) -> None:
    ex = idem.Executor(store_url, namespace="acme")
    seen: Dict[str, Any] = {}

    @idem.tool("idempotent_write")
    def book(args: Dict[str, Any], ctx: idem.Context) -> bool:
        seen.update(
            key=ctx.key, run=ctx.run_id, step=ctx.step, attempt=ctx.attempt,
            ns=ctx.namespace, tool=ctx.tool, cls=ctx.cls, sub=ctx.sub_key("hotel"),
        )
        return True

    result = ex.call(book, {"city": "Oslo"}, run="run-9", step=4)
    assert seen["run"] == "run-9" and seen["step"] == 4 and seen["attempt"] == 1
    assert seen["ns"] == "acme" and seen["tool"] == "book" and seen["cls"] == "idempotent_write"
    assert seen["key"] == result.key
    assert seen["sub"] == idem.sub_key(result.key, "hotel") != result.key
    assert result.key == idem.derive_key("book", "step", namespace="acme", run_id="run-9", step=4, args={"city": "Oslo"})


def test_async_tools_run_on_the_callers_loop_and_replay_runs_nothing(store_url: str) -> None:
    ex = idem.Executor(store_url)
    runs: List[int] = []

    @idem.tool("idempotent_write")
    async def notify(args: Dict[str, Any], ctx: idem.Context) -> str:
        await asyncio.sleep(0)
        runs.append(1)
        return "sent"

    async def main() -> None:
        assert (await ex.acall(notify, {"to": "x"}, call_id="n-1")).output == "sent"
        replay = ex.replay()
        assert replay.replaying
        assert (await replay.acall(notify, {"to": "x"}, call_id="n-1")).deduplicated
        with pytest.raises(errors.NotRecorded):
            await replay.acall(notify, {"to": "y"}, call_id="n-2")

    asyncio.run(main())
    # An async tool called without a loop runs to completion too.
    assert ex.call(notify, {"to": "z"}, call_id="n-3").output == "sent"
    assert runs == [1, 1]


def test_pydantic_models_are_arguments_and_outputs(store_url: str) -> None:
    pydantic = pytest.importorskip("pydantic")

    class Refund(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        order: str
        cents: int

    class Receipt(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        refund_id: str

    ex = idem.Executor(store_url)

    @idem.tool("non_idempotent_write")
    def refund(args: Refund, ctx: idem.Context) -> Receipt:
        assert isinstance(args, Refund)
        return Receipt(refund_id=f"r-{args.order}-{args.cents}")

    one = ex.call(refund, {"order": "o1", "cents": 500}, call_id="r1")
    two = ex.call(refund, Refund(order="o1", cents=500), call_id="r1")
    assert one.output == {"refund_id": "r-o1-500"} and two.deduplicated
    with pytest.raises(errors.InvalidArguments, match="cents"):
        ex.call(refund, {"order": "o1", "cents": "lots"}, call_id="r2")

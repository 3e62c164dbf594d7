"""The LangChain adapter, driven by langchain_core's own fake chat model
(no network): the model calls a write twice under one tool_call_id, the
run is retried, the run is replayed — one effect."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Dict, List

import pytest

from conftest import REQUIRED  # noqa: E402

if not REQUIRED:
    pytest.importorskip("langchain_core", reason="SKIPPED: LangChain (langchain-core) is not installed")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage  # noqa: E402

import idem_agents as idem  # noqa: E402
from idem_agents.langchain import as_tool  # noqa: E402


def model_turns() -> List[AIMessage]:
    email = {"to": "ada@example.com", "subject": "Your refund"}
    return [
        AIMessage(content="", tool_calls=[{"name": "send_email", "args": email, "id": "call_L1", "type": "tool_call"}]),
        # The model repeats the call under the same id.
        AIMessage(content="", tool_calls=[{"name": "send_email", "args": email, "id": "call_L1", "type": "tool_call"}]),
        AIMessage(content="The email is sent."),
    ]


def run_agent(executor: idem.Executor, tool: idem.Tool[Any], use_async: bool) -> List[ToolMessage]:
    """The loop an agent runs: ask the model, run its tool calls, repeat."""
    model = GenericFakeChatModel(messages=iter(model_turns()))
    lc_tool = as_tool(tool, executor)
    messages: List[BaseMessage] = [HumanMessage("Tell Ada her refund is on its way.")]
    answers: List[ToolMessage] = []
    while True:
        reply = model.invoke(messages)
        messages.append(reply)
        if not getattr(reply, "tool_calls", None):
            return answers
        for tool_call in reply.tool_calls:
            if use_async:
                answer = asyncio.run(lc_tool.ainvoke(tool_call))
            else:
                answer = lc_tool.invoke(tool_call)
            assert isinstance(answer, ToolMessage) and answer.tool_call_id == "call_L1"
            answers.append(answer)
            messages.append(answer)


@pytest.mark.parametrize("use_async", [False, True])
def test_the_model_calls_send_email_twice_and_the_run_is_retried_and_replayed_one_email(
    tmp_path: Any, use_async: bool
) -> None:
    executor = idem.Executor(f"sqlite://{tmp_path}/idem.db")
    sent: List[str] = []

    @idem.tool("non_idempotent_write")
    def send_email(args: Dict[str, Any], ctx: idem.Context) -> Dict[str, Any]:
        sent.append(args["to"])
        return {"message_id": f"<{ctx.key}@example.com>"}

    answers = run_agent(executor, send_email, use_async)
    answers += run_agent(executor, send_email, use_async)  # the run, retried
    answers += run_agent(executor.replay(), send_email, use_async)  # and replayed
    assert sent == ["ada@example.com"]
    outputs = [json.loads(str(a.content)) for a in answers]
    assert len(outputs) == 6 and all(o == outputs[0] for o in outputs)
    assert idem.derive_key("send_email", "call", call_id="call_L1") in outputs[0]["message_id"]


def test_a_call_without_a_tool_call_id_is_refused_and_runs_nothing(tmp_path: Any) -> None:
    executor = idem.Executor("memory:")

    @idem.tool("non_idempotent_write")
    def charge(args: Dict[str, Any]) -> str:
        raise AssertionError("no key: must not run")

    answer = json.loads(as_tool(charge, executor).invoke({"cents": 5}))
    assert answer["error"]["code"] == "invalid_key"
    assert "nothing ran" in answer["error"]["message"]

"""The OpenAI Agents SDK adapter, driven by a scripted model (the SDK's
``Model`` interface, no network): the model calls a write twice under one
call id, the run is retried, the run is replayed — one effect."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Dict, List

import pytest

from conftest import REQUIRED  # noqa: E402

if REQUIRED:
    import agents
else:
    agents = pytest.importorskip("agents", reason="SKIPPED: the OpenAI Agents SDK (openai-agents) is not installed")

from agents import Agent, ModelResponse, Runner, Usage  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from openai.types.responses import (  # noqa: E402
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

import idem_agents as idem  # noqa: E402
from idem_agents.openai_agents import function_tool  # noqa: E402

# Nothing leaves the machine: no trace export.
agents.set_tracing_disabled(True)


def call(call_id: str, name: str, args: Dict[str, Any]) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        type="function_call", id=f"fc_{call_id}", call_id=call_id, name=name,
        arguments=json.dumps(args), status="completed",
    )


def say(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id="msg_1", type="message", role="assistant", status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


class ScriptedModel(Model):
    """Answers each turn with the next item of its script; keeps what the
    tools answered."""

    def __init__(self, turns: List[List[Any]]) -> None:
        self.turns = list(turns)
        self.inputs: List[Any] = []

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> ModelResponse:
        self.inputs.append(input)
        return ModelResponse(output=self.turns.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def script() -> List[List[Any]]:
    email = {"to": "ada@example.com", "subject": "Your refund"}
    return [
        [call("call_A", "send_email", email)],
        # The model calls it again "to be sure", under the same call id.
        [call("call_A", "send_email", email)],
        [say("The email is sent.")],
    ]


def tool_outputs(model: ScriptedModel) -> List[Any]:
    outputs = []
    for turn in model.inputs:
        for item in turn if isinstance(turn, list) else []:
            if isinstance(item, dict) and item.get("type") == "function_call_output":
                outputs.append(json.loads(item["output"]))
    return outputs


def test_the_model_calls_send_email_twice_and_the_run_is_retried_and_replayed_one_email(tmp_path: Any) -> None:
    executor = idem.Executor(f"sqlite://{tmp_path}/idem.db")
    sent: List[str] = []

    @idem.tool("non_idempotent_write")
    def send_email(args: Dict[str, Any], ctx: idem.Context) -> Dict[str, Any]:
        sent.append(args["to"])
        return {"message_id": f"<{ctx.key}@example.com>"}

    def run(ex: idem.Executor) -> ScriptedModel:
        model = ScriptedModel(script())
        agent = Agent(name="support", model=model, tools=[function_tool(send_email, ex)])
        result = asyncio.run(Runner.run(agent, "Tell Ada her refund is on its way."))
        assert result.final_output == "The email is sent."
        return model

    first = run(executor)
    retried = run(executor)
    replayed = run(executor.replay())
    assert sent == ["ada@example.com"]
    answers = tool_outputs(first) + tool_outputs(retried) + tool_outputs(replayed)
    assert len(answers) >= 3 and all(a == answers[0] for a in answers)
    assert answers[0]["message_id"].endswith("@example.com>")
    assert idem.derive_key("send_email", "call", call_id="call_A") in answers[0]["message_id"]


def test_an_irreversible_tool_waiting_for_approval_tells_the_model_so(tmp_path: Any) -> None:
    executor = idem.Executor(f"sqlite://{tmp_path}/idem.db", approvals="pending")

    @idem.tool("irreversible")
    def close_account(args: Dict[str, Any]) -> str:
        raise AssertionError("not approved: must not run")

    model = ScriptedModel([[call("call_B", "close_account", {"id": 4})], [say("Waiting.")]])
    agent = Agent(name="support", model=model, tools=[function_tool(close_account, executor)])
    asyncio.run(Runner.run(agent, "Close account 4."))
    (answer,) = tool_outputs(model)
    assert answer["error"]["code"] == "approval_pending"

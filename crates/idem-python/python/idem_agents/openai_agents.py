"""idem tools as OpenAI Agents SDK tools, keyed by the model's call id.

    from agents import Agent
    from idem_agents.openai_agents import function_tool

    agent = Agent(name="support", tools=[function_tool(send_email, executor)])

The SDK gives each invocation the model's ``tool_call_id``; the tool's
call through idem is keyed by it, so a call the model (or a retried or
replayed run) makes again under the same id is answered from its record
and its effect is not repeated. Errors go back to the model as idem's
JSON answer (``{"error": {"code", "message"}}``), which says whether
anything ran and what to do next.
"""

from __future__ import annotations

import json
from typing import Any, Dict

from agents import FunctionTool
from agents.tool_context import ToolContext

from ._executor import Executor
from ._tool import Tool
from .errors import IdemError


def _schema(tool: Tool[Any]) -> Dict[str, Any]:
    if tool.model is not None:
        schema: Dict[str, Any] = tool.model.model_json_schema()  # type: ignore[attr-defined]
        return schema
    return {"type": "object", "additionalProperties": True}


def function_tool(tool: Tool[Any], executor: Executor) -> FunctionTool:
    """``tool`` as an Agents SDK ``FunctionTool`` that calls it through
    ``executor`` under the model's call id."""

    async def invoke(ctx: ToolContext[Any], arguments: str) -> str:
        try:
            args = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as e:
            message = f"invalid arguments for tool `{tool.name}`: the arguments are not valid JSON ({e}); nothing ran"
            return json.dumps({"error": {"code": "invalid_arguments", "message": message}})
        try:
            result = await executor.acall(tool, args, call_id=ctx.tool_call_id)
        except IdemError as e:
            return json.dumps(e.content)
        return json.dumps(result.output)

    return FunctionTool(
        name=tool.name,
        description=tool.description,
        params_json_schema=_schema(tool),
        on_invoke_tool=invoke,
        strict_json_schema=False,
    )

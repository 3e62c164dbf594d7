"""idem tools as LangChain tools (``langchain_core``; LangGraph's
``ToolNode`` runs them as it runs any), keyed by the ``tool_call_id`` of
the model's tool call.

    from idem_agents.langchain import as_tool

    tools = [as_tool(send_email, executor)]
    model = chat_model.bind_tools(tools)

Invoked with a model's tool call (``{"name", "args", "id", "type":
"tool_call"}``, which LangGraph's ``ToolNode`` and agents pass), the call
is keyed by its id: the same tool call again — the model repeating it, a
retried or replayed graph — is answered from its record, and its effect
is not repeated. idem's errors come back as the tool's message, in the
words a model should read.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional, Tuple

from langchain_core.tools import BaseTool
from pydantic import ConfigDict

from ._executor import Executor
from ._tool import Tool
from .errors import IdemError


class IdemTool(BaseTool):  # type: ignore[misc,unused-ignore]  # untyped under pyproject.toml
    """A LangChain tool that runs an idem tool through an executor."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    idem_tool: Any
    """The idem tool (``idem_agents.Tool``)."""
    executor: Any
    """The executor it runs through (``idem_agents.Executor``)."""

    def _to_args_and_kwargs(
        self, tool_input: Any, tool_call_id: Optional[str]
    ) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
        # The call id LangChain read from the tool call is handed on, not
        # dropped: it is the call's key.
        _, kwargs = super()._to_args_and_kwargs(tool_input, tool_call_id)
        return (), {"arguments": kwargs, "tool_call_id": tool_call_id}

    def _run(self, arguments: Dict[str, Any], tool_call_id: Optional[str]) -> str:
        try:
            result = self.executor.call(self.idem_tool, arguments, call_id=tool_call_id)
        except IdemError as e:
            return json.dumps(e.content)
        return json.dumps(result.output)

    async def _arun(self, arguments: Dict[str, Any], tool_call_id: Optional[str]) -> str:
        try:
            result = await self.executor.acall(self.idem_tool, arguments, call_id=tool_call_id)
        except IdemError as e:
            return json.dumps(e.content)
        return json.dumps(result.output)


def as_tool(tool: Tool[Any], executor: Executor) -> IdemTool:
    """``tool`` as a LangChain tool that calls it through ``executor``
    under the model's ``tool_call_id``."""
    schema: Dict[str, Any] = (
        tool.model.model_json_schema()  # type: ignore[attr-defined]
        if tool.model is not None
        else {"type": "object", "properties": {}, "additionalProperties": True}
    )
    return IdemTool(
        name=tool.name,
        description=tool.description or tool.name,
        args_schema=schema,
        idem_tool=tool,
        executor=executor,
    )

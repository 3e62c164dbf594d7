"""idem tools as CrewAI tools (``crewai.tools.BaseTool``), keyed by the
run they belong to and their arguments.

    from idem_agents.crewai import as_crewai_tool

    send = as_crewai_tool(send_email, executor, run=f"refund-{order_id}")
    agent = Agent(role="support", goal="…", backstory="…", tools=[send])

CrewAI does not hand a tool the model's call id (as of crewai 1.15: the
native function-calling path reads it and keeps it for the tool message;
the text (ReAct) path has none), and its task and crew ids are fresh
random UUIDs in every process. So the key is what a retry and a replay
share: ``run``, the identity of the work the crew does (an order, a
ticket, a request id — the same when the task is retried or the crew
kicked off again for it), with the tool's name and canonical arguments.
The same write with the same arguments in one run is one effect: the
model repeating it, a retried task, a replayed crew. Without a run,
``window`` makes the same arguments within that time one effect; a tool
with a natural or custom key needs neither. A write with no key at all is
refused, and nothing runs.

CrewAI's own tool cache (per crew, in memory, keyed by the arguments
alone) is turned off for these tools: the store's record answers
duplicates, durably and across processes. idem's errors come back as the
tool's output, in the words a model should read.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional

from crewai.tools import BaseTool
from pydantic import ConfigDict, Field

from ._executor import Executor
from ._tool import Duration, Tool
from .errors import IdemError


def _never_cache(_args: Any = None, _result: Any = None) -> bool:
    return False


class IdemCrewTool(BaseTool):  # type: ignore[misc,unused-ignore]  # untyped under pyproject.toml
    """A CrewAI tool that runs an idem tool through an executor."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    idem_tool: Any = Field(exclude=True)
    """The idem tool (``idem_agents.Tool``)."""
    executor: Any = Field(exclude=True)
    """The executor it runs through (``idem_agents.Executor``)."""
    run_id: Optional[str] = None
    """The run the calls belong to: part of every call's key."""
    window: Optional[Any] = None
    """Without a run: the same arguments within this window are one effect."""

    def _site(self) -> Dict[str, Any]:
        """Where the key comes from: the run, else the window."""
        return dict(run=self.run_id, window=None if self.run_id is not None else self.window)

    def _run(self, **arguments: Any) -> str:
        try:
            result = self.executor.call(self.idem_tool, arguments, **self._site())
        except IdemError as e:
            return json.dumps(e.content)
        return json.dumps(result.output)

    async def _arun(self, **arguments: Any) -> str:
        try:
            result = await self.executor.acall(self.idem_tool, arguments, **self._site())
        except IdemError as e:
            return json.dumps(e.content)
        return json.dumps(result.output)


def as_crewai_tool(
    tool: Tool[Any],
    executor: Executor,
    *,
    run: Optional[str] = None,
    window: Optional[Duration] = None,
) -> IdemCrewTool:
    """``tool`` as a CrewAI tool that calls it through ``executor``, keyed
    by ``run`` (the identity a retried task and a replayed crew share) and
    the arguments, or without a run by the arguments within ``window``."""
    return IdemCrewTool(
        name=tool.name,
        description=tool.description or tool.name,
        # None: CrewAI then takes any arguments and checks none.
        args_schema=tool.model,
        cache_function=_never_cache,
        idem_tool=tool,
        executor=executor,
        run_id=run,
        window=window,
    )

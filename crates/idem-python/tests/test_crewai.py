"""The CrewAI adapter, driven by a scripted model (a ``crewai.BaseLLM``
subclass that makes native tool calls from a script; no network):
the model calls a write twice, the task is retried, the crew is replayed —
one effect."""

# No `from __future__ import annotations`: CrewAI reads a guardrail's
# return annotation at run time and refuses it as a string.
import asyncio
import json
import os
from typing import Any, Dict, List, Optional, Tuple

import pydantic
import pytest

from conftest import REQUIRED  # noqa: E402

if not REQUIRED:
    pytest.importorskip("crewai", reason="SKIPPED: CrewAI (crewai) is not installed")

# CrewAI asks before sending telemetry and traces; a test sends nothing.
os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_DISABLE_TRACKING", "true")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")

from crewai import Agent, BaseLLM, Crew, Task  # noqa: E402

import idem_agents as idem  # noqa: E402
from idem_agents.crewai import as_crewai_tool  # noqa: E402

@pytest.fixture(autouse=True)
def crewai_storage(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """CrewAI keeps each kickoff's task outputs in a database of its own:
    in the test's directory, not the user's. A new directory is a "first
    execution", which waits for an answer about tracing unless CrewAI is
    told it runs under test."""
    monkeypatch.setenv("CREWAI_STORAGE_DIR", str(tmp_path / "crewai"))
    monkeypatch.setenv("CREWAI_TESTING", "true")


# CrewAI warns of its own deprecated fields as it reads them (dozens a run).
pytestmark = pytest.mark.filterwarnings(r"ignore::DeprecationWarning:crewai\.")

EMAIL = {"to": "ada@example.com", "subject": "Your refund"}


class ScriptedLLM(BaseLLM):  # type: ignore[misc]  # untyped under pyproject.toml
    """A model that, in each attempt at the task, calls ``send_email``
    (natively, with a call id) twice — the second time "to be sure" — then
    answers, and keeps the tool's answers it read in ``answers``."""

    answers: Any  # the caller's list (a `List` field would be a copy)

    def supports_function_calling(self) -> bool:
        return True

    def call(self, messages: Any, tools: Any = None, callbacks: Any = None, available_functions: Any = None, **_: Any) -> Any:
        read = [m["content"] for m in messages if isinstance(m, dict) and m.get("role") == "tool"]
        if len(read) < 2 and tools:
            # CrewAI keeps this id for the tool message; the tool never sees it.
            call = {"name": "send_email", "arguments": json.dumps(EMAIL)}
            return [{"id": f"call_C{len(read)}", "type": "function", "function": call}]
        self.answers.extend(json.loads(r) for r in read)
        return "The email is sent."

    async def acall(self, messages: Any, tools: Any = None, callbacks: Any = None, available_functions: Any = None, **_: Any) -> Any:
        return self.call(messages, tools)


def crew_for(tool: Any, answers: Optional[List[Any]] = None) -> Tuple[Crew, List[str]]:
    """The crew a program builds for one refund, built anew on each run,
    and the answers its task's check saw (the first is sent back, so
    CrewAI retries the task once). The model keeps the tool's answers in
    ``answers``."""
    agent = Agent(
        role="support",
        goal="tell customers about their refunds",
        backstory="a careful support agent",
        llm=ScriptedLLM(model="scripted", answers=[] if answers is None else answers),
        tools=[tool],
        max_iter=5,
        verbose=False,
    )
    attempts: List[str] = []

    def checked(output: Any) -> Tuple[bool, Any]:
        # The first answer is sent back: CrewAI retries the task.
        attempts.append(str(output.raw))
        return (len(attempts) > 1, "say which email was sent" if len(attempts) == 1 else output.raw)

    task = Task(
        description="Tell Ada her refund is on its way.",
        expected_output="a sentence",
        agent=agent,
        guardrail=checked,
        guardrail_max_retries=1,
    )
    return Crew(agents=[agent], tasks=[task], verbose=False), attempts


def kickoff(crew: Crew, use_async: bool) -> None:
    """Run the crew: ``kickoff``, or CrewAI's native async ``akickoff``
    (which runs tools on a worker thread, through their sync ``run``)."""
    if use_async:
        asyncio.run(crew.akickoff())
    else:
        crew.kickoff()


@pytest.mark.parametrize("use_async", [False, True])
def test_the_model_sends_twice_the_task_is_retried_and_the_crew_replayed_one_email(store_url: str, use_async: bool) -> None:
    executor = idem.Executor(store_url)
    sent: List[str] = []
    outputs: List[str] = []

    @idem.tool("non_idempotent_write")
    def send_email(args: Dict[str, Any], ctx: idem.Context) -> Dict[str, Any]:
        sent.append(args["to"])
        outputs.append(f"<{ctx.key}@example.com>")
        return {"message_id": outputs[-1]}

    answers: List[Any] = []
    tool = as_crewai_tool(send_email, executor, run="refund-1042")
    crew, attempts = crew_for(tool, answers)
    kickoff(crew, use_async)  # the model calls send_email twice; the task is retried and it calls twice again
    assert len(attempts) == 2, "CrewAI retried the task"
    kickoff(crew_for(tool, answers)[0], use_async)  # the crew, kicked off again (a retried run)
    replayed = as_crewai_tool(send_email, executor.replay(), run="refund-1042")
    kickoff(crew_for(replayed, answers)[0], use_async)
    assert sent == ["ada@example.com"]
    # Twelve calls reached the tool (3 runs, 2 attempts, 2 calls); every
    # one was answered with the one email's id.
    assert answers == [{"message_id": outputs[0]}] * 12
    # The tool called directly, as CrewAI's `arun` does, is answered the same.
    assert json.loads(asyncio.run(tool.arun(**EMAIL))) == {"message_id": outputs[0]}
    assert sent == ["ada@example.com"]
    assert idem.derive_key("send_email", "step", run_id="refund-1042", args=EMAIL) in outputs[0]


def send_email_into(sent: List[str], **options: Any) -> Any:
    """A ``send_email`` tool (``options`` as ``@idem.tool`` takes them)
    that appends each email it sends to ``sent``."""

    @idem.tool("non_idempotent_write", **options)
    def send_email(args: Dict[str, Any]) -> str:
        sent.append(args["to"])
        return "sent"

    return send_email


def test_another_run_sends_its_own_email(tmp_path: Any) -> None:
    executor = idem.Executor(f"sqlite://{tmp_path}/idem.db")
    sent: List[str] = []
    send_email = send_email_into(sent)
    crew_for(as_crewai_tool(send_email, executor, run="refund-1042"))[0].kickoff()
    crew_for(as_crewai_tool(send_email, executor, run="refund-1043"))[0].kickoff()
    assert sent == ["ada@example.com", "ada@example.com"]


class Email(pydantic.BaseModel):
    to: str
    subject: str


def test_a_pydantic_model_is_the_schema_crewai_gives_the_model_and_checks(tmp_path: Any) -> None:
    executor = idem.Executor(f"sqlite://{tmp_path}/idem.db")
    sent: List[Email] = []

    @idem.tool("non_idempotent_write")
    def send_email(args: Email) -> str:
        sent.append(args)
        return "sent"

    tool = as_crewai_tool(send_email, executor, run="refund-1042")
    assert tool.args_schema is Email
    crew_for(tool)[0].kickoff()
    assert sent == [Email(**EMAIL)]
    with pytest.raises(ValueError, match="arguments validation failed"):
        tool.run(to="ada@example.com")
    assert len(sent) == 1


def test_without_a_run_the_window_makes_the_same_arguments_one_email(tmp_path: Any) -> None:
    executor = idem.Executor(f"sqlite://{tmp_path}/idem.db")
    sent: List[str] = []
    send_email = send_email_into(sent)
    crew_for(as_crewai_tool(send_email, executor, window=3600))[0].kickoff()
    crew_for(as_crewai_tool(send_email, executor, window=3600))[0].kickoff()
    assert sent == ["ada@example.com"]


def test_a_natural_key_needs_no_run(tmp_path: Any) -> None:
    executor = idem.Executor(f"sqlite://{tmp_path}/idem.db")
    sent: List[str] = []
    send_email = send_email_into(sent, key=idem.natural("to", subject=lambda s: s.lower(), window="24h"))
    crew_for(as_crewai_tool(send_email, executor))[0].kickoff()
    crew_for(as_crewai_tool(send_email, executor))[0].kickoff()
    assert sent == ["ada@example.com"]


def test_a_write_with_no_key_is_refused_and_runs_nothing() -> None:
    executor = idem.Executor("memory:")

    @idem.tool("non_idempotent_write")
    def charge(args: Dict[str, Any]) -> str:
        raise AssertionError("no key: must not run")

    answer: Optional[Dict[str, Any]] = json.loads(as_crewai_tool(charge, executor).run(cents=5))
    assert answer is not None and answer["error"]["code"] == "invalid_key"
    assert "nothing ran" in answer["error"]["message"]

"""MCP over streamable HTTP by hand, for what the official SDK's client does
not do (MCP tasks), shared by the Python cases of `idem proxy` and of the
example server."""

import json

ACCEPT = {"Accept": "application/json, text/event-stream"}


async def rpc(http, url: str, message: dict, session: str | None = None, headers: dict | None = None) -> tuple[dict | None, str | None]:
    """POST one JSON-RPC message: the answer (from JSON or the event
    stream; `None` for a notification) and the session id."""
    sent = {**ACCEPT, **(headers or {}), **({"mcp-session-id": session} if session else {})}
    answer = await http.post(url, json=message, headers=sent)
    if answer.status_code not in (200, 202):
        raise AssertionError(f"{message.get('method')}: HTTP {answer.status_code} {answer.text[:200]}")
    session = answer.headers.get("mcp-session-id", session)
    if "id" not in message:
        return None, session
    if answer.headers.get("content-type", "").startswith("application/json"):
        return answer.json(), session
    for line in answer.text.splitlines():
        if line.startswith("data:") and line[5:].strip():
            data = json.loads(line[5:])
            if data.get("id") == message["id"]:
                return data, session
    raise AssertionError(f"no answer to {message['method']}: {answer.text[:300]}")


async def task_session(http, url: str, headers: dict | None = None) -> str:
    """A session that declared MCP's tasks extension."""
    _, session = await rpc(http, url, {
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18",
                   "capabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
                   "clientInfo": {"name": "tasks-probe", "version": "1"}},
    }, headers=headers)
    await rpc(http, url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session, headers)
    return session


async def poll_task(http, url: str, session: str, task_id: str, headers: dict | None = None, polls: int = 40) -> tuple[dict, int]:
    """`tasks/get` every quarter second until the task completes: its last
    state and the number of polls."""
    import asyncio

    for n in range(polls):
        got, _ = await rpc(http, url, {
            "jsonrpc": "2.0", "id": 10 + n, "method": "tasks/get", "params": {"taskId": task_id},
        }, session, headers)
        if "error" in got:
            raise AssertionError(json.dumps(got)[:300])
        if got["result"]["status"] == "completed":
            return got["result"], n + 1
        await asyncio.sleep(0.25)
    raise AssertionError(f"task {task_id} did not complete: {json.dumps(got)[:300]}")

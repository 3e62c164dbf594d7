"""An upstream MCP server for the crash tests of `idem proxy`, written with
the official Python MCP SDK: one tool, `append`, that writes a line to a
journal (with the idempotency key the proxy sent in `_meta`) and, while the
file named by SLOW_UPSTREAM_HOLD exists, waits before it finishes, so that
the test can kill it mid-call. Its process id is written to
SLOW_UPSTREAM_PID when it starts.

Over stdio by default. With SLOW_UPSTREAM_FD it serves streamable HTTP (at
/mcp) on that listening socket, inherited from the test, which keeps it
open: a server killed and started again on the same socket is the same
address throughout, and a connection made in between waits in the socket's
queue instead of being refused. With SLOW_UPSTREAM_CERT and
SLOW_UPSTREAM_KEY it serves HTTPS with that certificate; with
SLOW_UPSTREAM_TOKEN every request must carry `Authorization: Bearer TOKEN`
(401 otherwise).
"""

import asyncio
import os
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer

JOURNAL = Path(os.environ["SLOW_UPSTREAM_JOURNAL"])
HOLD = Path(os.environ["SLOW_UPSTREAM_HOLD"])
Path(os.environ["SLOW_UPSTREAM_PID"]).write_text(str(os.getpid()))

server = MCPServer("slow-upstream")


def key_of(ctx: Context) -> str:
    meta = ctx.request_context.meta
    if meta is None:
        return "-"
    if not isinstance(meta, dict):
        meta = meta.model_dump(by_alias=True)
    return str(meta.get("io.idem/idempotencyKey", "-"))


@server.tool()
async def append(line: str, ctx: Context) -> str:
    """Append a line to the journal."""
    with JOURNAL.open("a") as journal:
        journal.write(f"start {line} {key_of(ctx)}\n")
    while HOLD.exists():
        await asyncio.sleep(0.05)
    with JOURNAL.open("a") as journal:
        journal.write(f"done {line}\n")
    return f"appended {line}"


if "SLOW_UPSTREAM_FD" in os.environ:
    import socket

    import uvicorn

    listening = socket.socket(fileno=int(os.environ["SLOW_UPSTREAM_FD"]))
    app = server.streamable_http_app()
    token = os.environ.get("SLOW_UPSTREAM_TOKEN")
    if token is not None:
        inner = app

        async def app(scope, receive, send):  # noqa: F811 - the guarded app
            if scope["type"] == "http":
                headers = dict(scope.get("headers") or [])
                if headers.get(b"authorization") != f"Bearer {token}".encode():
                    await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]})
                    await send({"type": "http.response.body", "body": b"no token"})
                    return
            await inner(scope, receive, send)

    tls = {}
    if "SLOW_UPSTREAM_CERT" in os.environ:
        tls = {"ssl_certfile": os.environ["SLOW_UPSTREAM_CERT"], "ssl_keyfile": os.environ["SLOW_UPSTREAM_KEY"]}
    config = uvicorn.Config(app, log_level="warning", **tls)
    asyncio.run(uvicorn.Server(config).serve(sockets=[listening]))
else:
    server.run("stdio")

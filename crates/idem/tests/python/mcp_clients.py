"""The idem MCP example server as chat clients use it, driven by the official
Python MCP SDK (`mcp` on PyPI) over stdio and over streamable HTTP.

Run by `crates/idem/tests/mcp/python.rs`, which builds the example and passes its path in
IDEM_MCP_EXAMPLE. Effects are counted from the demo providers' ledger (one
JSON line per effect, IDEM_DEMO_LEDGER), never from what idem answers.

Prints a transcript: each case, what the client sent, and what the model
reads. Exits non-zero on the first broken expectation.

Arguments name the transports (`stdio`, `http`; both by default).
IDEM_MCP_CASES names cases to run alone instead: `principals_over_http`
(its own test, which passes the principals file in IDEM_MCP_PRINCIPALS
and the callers' tokens, a JSON object, in IDEM_MCP_TOKENS),
`oauth_over_http` (an issuer this script serves) and `two_instances`
(two servers on the PostgreSQL server IDEM_TWO_INSTANCES_STORE names).
"""

import asyncio
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mcp import Client, StdioServerParameters, types

# The loopback OAuth issuer and MCP by hand, shared with `idem proxy`'s cases.
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "idem-testkit" / "python"))
from oauth_issuer import Issuer  # noqa: E402
from raw_mcp import ACCEPT, poll_task, rpc, task_session  # noqa: E402

EXAMPLE = os.environ["IDEM_MCP_EXAMPLE"]


def say(text: str) -> None:
    print(text, flush=True)


def reads(result: types.CallToolResult) -> str:
    """What the model reads: the text blocks of a result."""
    return "\n".join(block.text for block in result.content if block.type == "text")


def check(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


class Example:
    """One store and one ledger, and the example server serving them."""

    def __init__(self, transport: str, *args: str, **env: str) -> None:
        self.args = list(args)
        self.dir = Path(tempfile.mkdtemp(prefix="idem-mcp-py-"))
        self.ledger = self.dir / "ledger.jsonl"
        self.transport = transport
        self.env = {
            "IDEM_STORE": f"sqlite://{self.dir / 'idem.db'}",
            "IDEM_DEMO_LEDGER": str(self.ledger),
            **env,
        }
        self.http: subprocess.Popen | None = None
        self.url: str | None = None

    def effects(self, kind: str) -> int:
        if not self.ledger.exists():
            return 0
        lines = self.ledger.read_text().splitlines()
        return sum(1 for line in lines if json.loads(line)["effect"] == kind)

    def start(self) -> None:
        """Start the HTTP server (stdio servers are started per client)."""
        if self.transport != "http":
            return
        env = {**os.environ, **self.env}
        self.http = subprocess.Popen(
            [EXAMPLE, "--http", "127.0.0.1:0", *self.args],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for line in self.http.stderr:
            found = re.search(r"serving on (http://\S+/mcp)", line)
            if found:
                self.url = found.group(1)
                break
        check(self.url is not None, "the HTTP server printed its address")

    def stop(self) -> None:
        if self.http is not None:
            self.http.terminate()
            self.http.wait(timeout=10)
            self.http = None

    def restart(self) -> None:
        """A new server process on the same store."""
        self.stop()
        self.start()

    def client(self, **options) -> Client:
        if self.transport == "http":
            return Client(self.url, **options)
        server = StdioServerParameters(command=EXAMPLE, env=self.env)
        return Client(server, **options)


@contextlib.asynccontextmanager
async def example(transport: str, *args: str, **env: str):
    server = Example(transport, *args, **env)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(server.dir, ignore_errors=True)


CHARGE = {"customer": "ada", "cents": 4900}


async def claude_code(transport: str) -> None:
    say("\n## Claude Code: the tool-use id in _meta['claudecode/toolUseId']")
    async with example(transport) as server, server.client() as client:
        first = await client.call_tool("charge_card", CHARGE, meta={"claudecode/toolUseId": "toolu_01"})
        say(f"first call (toolu_01) -> {reads(first)!r}")
        resent = await client.call_tool("charge_card", CHARGE, meta={"claudecode/toolUseId": "toolu_01"})
        check(resent.meta["io.idem/deduplicated"], "the re-sent tool use is a duplicate")
        later = await client.call_tool("charge_card", CHARGE, meta={"claudecode/toolUseId": "toolu_02"})
        say(f"the model calls it again in a later turn (toolu_02); it reads:\n  {reads(later)}")
        check(later.meta["io.idem/deduplicated"], "a later turn's repeat is a duplicate")
        check(server.effects("charge") == 1, "one charge")
        meant = await client.call_tool(
            "charge_card", {**CHARGE, "intended_repeat": 1}, meta={"claudecode/toolUseId": "toolu_03"}
        )
        say(f"the user asks for a second charge (intended_repeat: 1) -> {reads(meant)!r}")
        check(server.effects("charge") == 2, "a deliberate repeat is a second charge")


async def vscode(transport: str) -> None:
    say("\n## VS Code: vscode.conversationId and vscode.requestId")
    async with example(transport) as server, server.client() as client:
        email = {"to": "ada@example.com", "subject": "Your refund"}
        ids = {"vscode.conversationId": "conv-1", "vscode.requestId": "req-1"}
        await client.call_tool("send_email", email, meta=ids)
        again = await client.call_tool("send_email", email, meta=ids)
        check(again.meta["io.idem/deduplicated"], "the same chat request is a duplicate")
        check(server.effects("email") == 1, "one email")
        charge = await client.call_tool("charge_card", CHARGE, meta=ids)
        later = await client.call_tool(
            "charge_card", CHARGE, meta={**ids, "vscode.requestId": "req-2"}
        )
        say(f"a charge, then the same charge in the next chat request -> {reads(later)[:60]!r}…")
        check(server.effects("charge") == 1, "one charge across chat requests")
        check(reads(charge).startswith("charged"), "the first charge ran")


async def codex(transport: str) -> None:
    say("\n## Codex: _meta['x-codex-turn-metadata']")
    async with example(transport) as server, server.client() as client:
        turn = json.dumps({"session_id": "s-1", "thread_id": "th-1", "turn_id": "t-1"})
        await client.call_tool("charge_card", CHARGE, meta={"x-codex-turn-metadata": turn})
        again = await client.call_tool("charge_card", CHARGE, meta={"x-codex-turn-metadata": turn})
        check(again.meta["io.idem/deduplicated"], "the same turn is a duplicate")
        check(server.effects("charge") == 1, "one charge")
        say("two calls in one turn -> one charge")


async def no_ids(transport: str) -> None:
    say("\n## Claude Desktop, Cursor, the Inspector: no ids at all")
    async with example(transport) as server, server.client() as client:
        first = await client.call_tool("charge_card", CHARGE)
        second = await client.call_tool("charge_card", CHARGE)
        say(f"charge_card twice -> {reads(first)!r}, then the model reads:\n  {reads(second)}")
        check(server.effects("charge") == 1, "one charge")
        await client.call_tool("create_customer", {"email": "Ada@Example.com", "name": "Ada"})
        found = await client.call_tool("create_customer", {"email": "ada@example.com", "name": "Ada L."})
        check(server.effects("customer") == 1, "one customer per address")
        say(f"create_customer reworded -> {reads(found)[:70]!r}…")
        listed = await client.list_tools()
        charge = next(t for t in listed.tools if t.name == "charge_card")
        check(charge.meta["io.idem/class"] == "non_idempotent_write", "the class is listed")
        check(charge.meta["io.idem/keying"] == "window", "the keying is listed")
        check("intended_repeat" in charge.input_schema["properties"], "the repeat argument is listed")
        say(f"tools/list says of charge_card: {charge.meta}")


async def window_boundary(transport: str) -> None:
    say("\n## A retry across what would be a clock boundary (a 2 s window here)")
    async with example(transport, IDEM_DEMO_REPEAT_WINDOW="2") as server, server.client() as client:
        # Just before a multiple of 2 s, then just after it.
        while not 1.70 <= time.time() % 2 < 1.80:
            await asyncio.sleep(0.01)
        first_at = time.time()
        await client.call_tool("charge_card", CHARGE)
        await asyncio.sleep(max(0.0, first_at + 0.40 - time.time()))
        check(int(time.time() // 2) != int(first_at // 2), "the retry is past the boundary")
        retry = await client.call_tool("charge_card", CHARGE)
        check(retry.meta["io.idem/deduplicated"], "the retry across the boundary is a duplicate")
        check(server.effects("charge") == 1, "one charge across the boundary")
        await asyncio.sleep(max(0.0, first_at + 2.2 - time.time()))
        await client.call_tool("charge_card", CHARGE)
        check(server.effects("charge") == 2, "a window after the first call, a new charge")
        say("retry 0.4 s later, across the boundary -> one charge; 2.2 s after the first -> a second")


class Person:
    """The person in the chat: answers every approval question with `action`."""

    def __init__(self, action: str) -> None:
        self.action = action
        self.asked: list[str] = []

    async def __call__(self, context, params):
        self.asked.append(params.message)
        return types.ElicitResult(action=self.action)


async def approvals(transport: str, mode: str) -> None:
    form = "elicitation/create" if mode == "legacy" else "an input-required result (2026-07-28)"
    say(f"\n## delete_account asked of the person in the chat, as {form}")
    async with example(transport) as server:
        yes = Person("accept")
        async with server.client(mode=mode, elicitation_callback=yes) as client:
            result = await client.call_tool("delete_account", {"customer": "ada"})
            say(f"the person was asked:\n  {yes.asked[0].replace(chr(10), chr(10) + '  ')}")
            say(f"they accept -> {reads(result)!r}")
            check(server.effects("delete") == 1, "accepted: deleted once")
            again = await client.call_tool("delete_account", {"customer": "ada"})
            check(again.meta["io.idem/deduplicated"] and len(yes.asked) == 1, "not asked twice")
        no = Person("decline")
        async with server.client(mode=mode, elicitation_callback=no) as client:
            result = await client.call_tool("delete_account", {"customer": "bob"})
            say(f"they decline -> the model reads:\n  {reads(result)}")
            check(result.is_error and server.effects("delete") == 1, "declined: nothing deleted")
        later = Person("cancel")
        async with server.client(mode=mode, elicitation_callback=later) as client:
            result = await client.call_tool("delete_account", {"customer": "carol"})
            say(f"they dismiss the question -> the model reads:\n  {reads(result)}")
            again = await client.call_tool("delete_account", {"customer": "carol"})
            check(again.is_error and len(later.asked) == 1, "dismissed: pending, never asked again")
            check(server.effects("delete") == 1, "nothing deleted")
        async with server.client(mode=mode) as client:
            result = await client.call_tool("delete_account", {"customer": "dave"})
            say(f"a client without elicitation -> the model reads:\n  {reads(result)}")
            check(result.is_error and server.effects("delete") == 1, "pending: nothing deleted")


async def restart(transport: str) -> None:
    say("\n## The server restarts between a call and its repeat")
    async with example(transport) as server:
        async with server.client() as client:
            first = await client.call_tool("charge_card", CHARGE)
        server.restart()
        async with server.client() as client:
            again = await client.call_tool("charge_card", CHARGE)
        check(again.meta["io.idem/deduplicated"], "answered from the record after a restart")
        check(reads(again).endswith(reads(first)), "with the first call's result")
        check(server.effects("charge") == 1, "one charge across the restart")
        say("charge, restart, the same charge -> one charge, answered from the SQLite record")


async def dropped_stream() -> None:
    say("\n## HTTP: the response is lost after the server got the call; re-sent with a new id")
    async with example("http", IDEM_DEMO_SLOW_CHARGE_MS="700") as server:
        async with server.client() as client:
            try:
                await client.call_tool("charge_card", CHARGE, read_timeout_seconds=0.2)
                check(False, "the first response does not arrive in time")
            except Exception as e:  # the SDK's timeout
                say(f"the client gave up on the response: {type(e).__name__}")
        async with server.client() as client:
            again = await client.call_tool("charge_card", CHARGE)
        check(server.effects("charge") == 1, "one charge")
        check(
            again.meta["io.idem/deduplicated"],
            f"the re-sent request is answered from the first: {reads(again)!r} {again.meta}",
        )
        say(f"re-sent -> one charge; the model reads:\n  {reads(again)}")


async def callers_apart(server: "Example", token_of, alice: str, bob: str) -> None:
    """The same unkeyed charge by `alice`, by her again and by `bob`, each
    with the bearer token `token_of(name)`: her repeat is hers, his charge
    his own."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    async def charge_as(name: str) -> types.CallToolResult:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token_of(name)}"}, timeout=30)
        async with http, Client(streamable_http_client(server.url, http_client=http)) as client:
            return await client.call_tool("charge_card", CHARGE)

    results = [await charge_as(name) for name in (alice, alice, bob)]
    flags = [r.meta["io.idem/deduplicated"] for r in results]
    say(f"charge_card with no ids as {alice}, {alice} again, {bob} -> deduplicated {flags}")
    check(flags == [False, True, False], f"alice's repeat is hers; bob's charge is his own: {flags}")
    check(results[0].meta["io.idem/key"] != results[2].meta["io.idem/key"], "their records are apart")
    check(server.effects("charge") == 2, f"two charges, one each: {server.effects('charge')}")


async def principals_over_http() -> None:
    say("\n## HTTP with --principals: alice and bob make the same call, each gets their own effect")
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    principals = os.environ["IDEM_MCP_PRINCIPALS"]
    tokens = json.loads(os.environ["IDEM_MCP_TOKENS"])

    # Refused before any store opens (this one could not be).
    nowhere = {**os.environ, "IDEM_STORE": "sqlite:///nonexistent/idem.db"}
    refused = subprocess.run([EXAMPLE, "--http", "0.0.0.0:0"], env=nowhere, capture_output=True, text=True, timeout=30)
    say(f"--http 0.0.0.0:0 without --principals -> exit {refused.returncode}: {refused.stderr.strip()[:120]}…")
    check(refused.returncode != 0 and "not a loopback address" in refused.stderr, refused.stderr)

    async with example("http", "--principals", principals) as server:
        async with httpx2.AsyncClient(timeout=10) as raw:
            initialize = {
                "jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}},
            }
            accept = {"Accept": "application/json, text/event-stream"}
            for what, headers in [
                ("no token", {}),
                ("a token the file does not list", {"Authorization": "Bearer idem_" + "0" * 64}),
                ("alice's token under another scheme", {"Authorization": f"Basic {tokens['alice']}"}),
            ]:
                answer = await raw.post(server.url, json=initialize, headers={**accept, **headers})
                challenge = answer.headers.get("www-authenticate", "")
                say(f"{what} -> HTTP {answer.status_code}; WWW-Authenticate: {challenge}")
                check(answer.status_code == 401, f"{what}: {answer.status_code} {answer.text[:200]}")
                check(challenge.startswith("Bearer"), f"the 401 names the scheme: {challenge!r}")
                check(tokens["alice"] not in answer.text + challenge, "no token in the answer")
        check(server.effects("charge") == 0, "nothing ran for a refused request")

        await callers_apart(server, lambda name: tokens[name], "alice", "bob")
        say("-> two charges: alice's once, bob's his own")


async def oauth_over_http() -> None:
    say("\n## HTTP with --oauth-issuer: two JWT subjects make the same call, each gets their own effect")
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    resource = "https://mcp.example.test/mcp"
    issuer = Issuer()
    try:
        args = ("--oauth-issuer", issuer.url, "--oauth-resource", resource)
        async with example("http", *args) as server:
            base = server.url.rsplit("/mcp", 1)[0]
            async with httpx2.AsyncClient(timeout=10) as raw:
                metadata = await raw.get(base + "/.well-known/oauth-protected-resource/mcp")
                say(f"GET /.well-known/oauth-protected-resource/mcp -> HTTP {metadata.status_code} {metadata.text}")
                check(metadata.status_code == 200 and metadata.json()["authorization_servers"] == [issuer.url], metadata.text)
                initialize = {
                    "jsonrpc": "2.0", "id": 1, "method": "initialize",
                    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}},
                }
                for what, token in [
                    ("no token", None),
                    ("a token for another resource", issuer.token("alice", "https://other.example.test/mcp")),
                    ("an expired token", issuer.token("alice", resource, expires_in=-3600)),
                    ("a token signed by a key the issuer does not publish", issuer.token("alice", resource, key=issuer.stranger)),
                ]:
                    headers = {**ACCEPT, **({"Authorization": f"Bearer {token}"} if token else {})}
                    answer = await raw.post(server.url, json=initialize, headers=headers)
                    challenge = answer.headers.get("www-authenticate", "")
                    say(f"{what} -> HTTP {answer.status_code}; WWW-Authenticate: {challenge[:110]}…")
                    check(answer.status_code == 401, f"{what}: {answer.status_code}")
                    check("resource_metadata=" in challenge, f"the 401 points to the metadata: {challenge}")
            check(server.effects("charge") == 0, "nothing ran for a refused request")

            # A fresh token each time: the subject is the caller, not the token.
            token = lambda subject: issuer.token(subject, resource)  # noqa: E731
            await callers_apart(server, token, "alice@example.test", "bob@example.test")
    finally:
        issuer.close()


async def two_instances() -> None:
    say("\n## two example servers on one PostgreSQL, sharing --state-secret-file: one server to their clients")
    import httpx2

    # A schema of its own: a store no earlier run wrote to.
    server = os.environ["IDEM_TWO_INSTANCES_STORE"]
    store = f"{server}{'&' if '?' in server else '?'}schema=example_two_{os.getpid()}_{int(time.time())}"
    secret = Path(tempfile.mkdtemp(prefix="idem-mcp-secret-")) / "state.secret"
    secret.write_bytes(os.urandom(32))
    knobs = {"IDEM_STORE": store, "IDEM_DEMO_SLOW_CHARGE_MS": "800", "IDEM_DEMO_TASKS_AFTER_MS": "200"}
    async with example("http", "--state-secret-file", str(secret), **knobs) as a:
        async with example("http", "--state-secret-file", str(secret), **knobs, IDEM_DEMO_LEDGER=str(a.ledger)) as b:
            # A program's call to one, its retry (the same key) to the other.
            keyed = {"io.idem/idempotencyKey": "order-7"}
            async with a.client() as client:
                first = await client.call_tool("charge_card", CHARGE, meta=keyed)
            async with b.client() as client:
                retried = await client.call_tool("charge_card", CHARGE, meta=keyed)
            say(f"charge_card keyed order-7 on A, retried on B -> deduplicated {retried.meta['io.idem/deduplicated']}")
            check(not first.is_error and retried.meta["io.idem/deduplicated"], reads(retried))
            check(a.effects("charge") == 1, f"one charge: {a.effects('charge')}")

            # Asked on A of a client that cannot ask its user; approved in
            # the chat on B; A's repeat is answered from the record.
            async with a.client() as client:
                pending = await client.call_tool("delete_account", {"customer": "erin"})
            yes = Person("accept")
            async with b.client(elicitation_callback=yes) as client:
                approved = await client.call_tool("delete_account", {"customer": "erin"})
            async with a.client() as client:
                again = await client.call_tool("delete_account", {"customer": "erin"})
            say(f"delete_account pending on A -> approved in the chat on B ({reads(approved)!r}) -> A's repeat deduplicated {again.meta.get('io.idem/deduplicated')}")
            check(pending.is_error and not approved.is_error, f"{reads(pending)!r} / {reads(approved)!r}")
            check(again.meta.get("io.idem/deduplicated") is True, reads(again))
            check(a.effects("delete") == 1, f"deleted once: {a.effects('delete')}")

            # A long charge made a task on A; the task read on B.
            async with httpx2.AsyncClient(timeout=30) as http:
                on_a = await task_session(http, a.url)
                made, _ = await rpc(http, a.url, {
                    "jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": "charge_card", "arguments": {"customer": "fay", "cents": 1200}},
                }, on_a)
                task = made["result"]
                say(f"a 0.8 s charge on A -> {task.get('resultType')} {task.get('status')}: {task.get('statusMessage')!r}")
                check(task.get("resultType") == "task" and task["status"] == "working", json.dumps(made)[:300])
                on_b = await task_session(http, b.url)
                result, polls = await poll_task(http, b.url, on_b, task["taskId"])
                text = result["result"]["content"][0]["text"]
                say(f"tasks/get on B, {polls} polls -> {result['status']}: {text!r}")
                check("1200" in text, json.dumps(result)[:300])
                check(a.effects("charge") == 2, f"fay charged once: {a.effects('charge')}")


CASES = {
    "principals_over_http": principals_over_http,
    "oauth_over_http": oauth_over_http,
    "two_instances": two_instances,
}


async def main() -> None:
    chosen = os.environ.get("IDEM_MCP_CASES", "").split()
    if chosen:
        for name in chosen:
            await CASES[name]()
        say("\nall cases passed")
        return
    transports = sys.argv[1:] or ["stdio", "http"]
    for transport in transports:
        say(f"\n# Over {transport}")
        await claude_code(transport)
        await vscode(transport)
        await codex(transport)
        await no_ids(transport)
        await window_boundary(transport)
        await approvals(transport, "legacy")
        await approvals(transport, "auto")
        await restart(transport)
    if "http" in transports:
        await dropped_stream()
    say("\nall cases passed")


if __name__ == "__main__":
    asyncio.run(main())

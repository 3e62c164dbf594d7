"""`idem proxy` in front of MCP servers nobody on this project wrote, driven
by the official Python MCP SDK (`mcp` on PyPI) as a client.

Run by `crates/idem-cli/tests/proxy/upstreams.rs`, which passes the `idem` program in
IDEM_BIN and the npm servers' directory (node_modules/@modelcontextprotocol)
in IDEM_MCP_SERVERS. Each scenario runs twice, straight against the server
and through the proxy, and counts the upstream's effects from the upstream
itself (the file, the knowledge graph read back, a journal), never from
what idem answers.

Prints a transcript and the table of effects; exits non-zero on the first
broken expectation.
"""

import asyncio
import anyio
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mcp import Client, StdioServerParameters, types

# The loopback OAuth issuer and MCP by hand, shared with the example server's cases.
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "idem-testkit" / "python"))
from oauth_issuer import Issuer  # noqa: E402
from raw_mcp import poll_task, rpc, task_session  # noqa: E402

IDEM = os.environ["IDEM_BIN"]
SERVERS = Path(os.environ["IDEM_MCP_SERVERS"])
NODE = os.environ.get("IDEM_NODE") or shutil.which("node")
HERE = Path(__file__).parent
TABLE: list[tuple[str, str, str, str]] = []


def say(text: str) -> None:
    print(text, flush=True)


def reads(result: types.CallToolResult) -> str:
    """What the model reads: the text blocks of a result."""
    return "\n".join(block.text for block in result.content if block.type == "text")


def last(result: types.CallToolResult):
    """The upstream's answer as JSON: its last text block (idem may put a
    sentence before it)."""
    texts = [block.text for block in result.content if block.type == "text"]
    return json.loads(texts[-1])


def check(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def npm_server(name: str, *args: str) -> list[str]:
    return [NODE, str(SERVERS / name / "dist" / "index.js"), *args]


class Person:
    """The person in the chat: accepts every approval question."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def __call__(self, context, params):
        self.asked.append(params.message)
        return types.ElicitResult(action="accept")


class Place:
    """A temporary directory with an idem store in it."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="idem-proxy-py-"))
        self.store = f"sqlite://{self.dir / 'idem.db'}"

    def direct(self, command: list[str], env: dict[str, str] | None = None, **options) -> Client:
        server = StdioServerParameters(command=command[0], args=command[1:], env=env or {})
        return Client(server, **options)

    def proxied(
        self, command: list[str], env: dict[str, str] | None = None, config: str | None = None, **options
    ) -> Client:
        args = ["proxy"]
        if config is not None:
            path = self.dir / "proxy.toml"
            path.write_text(config)
            args += ["--config", str(path)]
        server = StdioServerParameters(
            command=IDEM, args=[*args, "--", *command], env={"IDEM_STORE": self.store, **(env or {})}
        )
        return Client(server, **options)

    def through(self, url: str, config: str | None = None, **options) -> Client:
        """A client of `idem proxy --upstream URL` (over stdio)."""
        args = ["proxy", "--upstream", url]
        if config is not None:
            path = self.dir / "proxy.toml"
            path.write_text(config)
            args += ["--config", str(path)]
        server = StdioServerParameters(command=IDEM, args=args, env={"IDEM_STORE": self.store})
        return Client(server, **options)

    def idem(self, *args: str) -> str:
        out = subprocess.run([IDEM, "--store", self.store, *args], capture_output=True, text=True, check=True)
        return out.stdout


@contextlib.contextmanager
def place():
    where = Place()
    try:
        yield where
    finally:
        shutil.rmtree(where.dir, ignore_errors=True)


def filesystem(here: Place, proxied: bool) -> tuple[Path, Client, Person]:
    """server-filesystem on a directory of its own, straight or through the
    proxy; the person in the chat accepts what the proxy asks."""
    root = here.dir / "files"
    root.mkdir()
    command = npm_server("server-filesystem", str(root))
    person = Person()
    client = here.proxied(command, elicitation_callback=person) if proxied else here.direct(command)
    return root, client, person


EDIT = {"edits": [{"oldText": "a", "newText": "aa"}]}


async def edit_file() -> None:
    say("\n## server-filesystem: `edit_file` a -> aa, sent again after its response was lost")
    counts = []
    for proxied in (False, True):
        with place() as here:
            root, client, person = filesystem(here, proxied)
            target = root / "notes.txt"
            target.write_text("a")
            async with client:
                arguments = {"path": str(target), **EDIT}
                meta = {"io.idem/idempotencyKey": "edit-notes-1"}
                first = await client.call_tool("edit_file", arguments, meta=meta)
                again = await client.call_tool("edit_file", arguments, meta=meta)
            text = target.read_text()
            edits = len(text) - 1
            counts.append(edits)
            route = "through idem proxy" if proxied else "directly"
            say(f"{route}: the file reads {text!r} ({edits} edit(s)); the repeat answered error={again.is_error}")
            if proxied:
                say(f"  the person was asked once:\n    {person.asked[0].splitlines()[0]}")
                check(text == "aa", "through the proxy the file changes once")
                check(len(person.asked) == 1, "the approval is asked once")
                check(again.meta["io.idem/deduplicated"], "the repeat is answered from the record")
                check(reads(again) == reads(first), "the repeat answers as the first did")
                ls = here.idem("ls", "--namespace", "mcp/secure-filesystem-server")
                check("edit_file" in ls, f"idem ls shows the proxied call:\n{ls}")
                say(f"  idem ls --namespace mcp/secure-filesystem-server:\n    {ls.splitlines()[1]}")
            else:
                check(edits == 2, f"directly the repeat edits again ({text!r})")
    TABLE.append(("filesystem: edit_file a->aa, resent", "edits applied", *map(str, counts)))


async def move_file() -> None:
    say("\n## server-filesystem: `move_file`, sent again")
    answers = []
    for proxied in (False, True):
        with place() as here:
            root, client, person = filesystem(here, proxied)
            (root / "draft.txt").write_text("hello")
            async with client:
                arguments = {"source": str(root / "draft.txt"), "destination": str(root / "final.txt")}
                meta = {"io.idem/idempotencyKey": "move-draft-1"}
                first = await client.call_tool("move_file", arguments, meta=meta)
                again = await client.call_tool("move_file", arguments, meta=meta)
            moved = int((root / "final.txt").exists() and not (root / "draft.txt").exists())
            route = "through idem proxy" if proxied else "directly"
            say(f"{route}: first -> {reads(first)!r}\n  repeat -> error={again.is_error} {reads(again)!r}")
            check(moved == 1 and not first.is_error, "the file is moved")
            if proxied:
                check(not again.is_error and reads(again) == reads(first), "the repeat answers as the first did")
            else:
                check(again.is_error, "directly the repeat fails: the source is gone")
            answers.append(f"1 move, repeat {'fails' if again.is_error else 'answers as the first'}")
    TABLE.append(("filesystem: move_file, resent", "files moved; the repeat's answer", *answers))


ENTITY = {"entities": [{"name": "Ada", "entityType": "person", "observations": ["wrote the first program"]}]}


async def create_entities() -> None:
    say("\n## server-memory: `create_entities`, sent again (a program's retry, then a model's repeat)")
    results = []
    for proxied in (False, True):
        with place() as here:
            env = {"MEMORY_FILE_PATH": str(here.dir / "memory.jsonl")}
            command = npm_server("server-memory")
            client = here.proxied(command, env=env) if proxied else here.direct(command, env=env)
            async with client:
                meta = {"io.idem/idempotencyKey": "ada-1"}
                first = await client.call_tool("create_entities", ENTITY, meta=meta)
                again = await client.call_tool("create_entities", ENTITY, meta=meta)
                # A chat client sends no key: the model repeats the call.
                other = {"entities": [{"name": "Grace", "entityType": "person", "observations": []}]}
                chat_first = await client.call_tool("create_entities", other)
                chat_again = await client.call_tool("create_entities", other)
                graph = await client.call_tool("read_graph", {})
            entities = last(graph)["entities"]
            route = "through idem proxy" if proxied else "directly"
            say(f"{route}: first -> {reads(first)[:70]!r}…\n  repeat -> {reads(again)[:70]!r}")
            say(f"  a model's repeat (no key) -> {reads(chat_again)[:120]!r}")
            created = len(last(again))
            check(len(entities) == 2, f"the graph holds Ada and Grace once each: {entities}")
            if proxied:
                check(reads(again) == reads(first), "the retry answers as the first did")
                check(chat_again.meta["io.idem/deduplicated"], "the model's repeat is a duplicate")
                check("already done" in reads(chat_again).lower(), "the model is told it was already done")
            else:
                check(json.loads(reads(again)) == [], "directly the retry answers an empty list")
                check(reads(chat_again) == "[]", "directly the model's repeat answers an empty list")
            results.append(f"{len(entities)} in the graph; the retry answers {created} created")
            del chat_first
    TABLE.append(("memory: create_entities, resent", "entities; the repeat's answer", *results))


async def over_http() -> None:
    say("\n## `idem proxy --listen`: server-memory served over streamable HTTP, a call sent again")
    with place() as here:
        env = {**os.environ, "IDEM_STORE": here.store, "MEMORY_FILE_PATH": str(here.dir / "memory.jsonl")}
        command = [IDEM, "proxy", "--listen", "127.0.0.1:0", "--no-auth", "--", *npm_server("server-memory")]
        proxy = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
        try:
            url = None
            for line in proxy.stderr:
                found = re.search(r"serving \S+ on (http://\S+/mcp)", line)
                if found:
                    url = found.group(1)
                    break
            check(url is not None, "the proxy printed its address")
            async with Client(url) as client:
                meta = {"io.idem/idempotencyKey": "ada-http-1"}
                first = await client.call_tool("create_entities", ENTITY, meta=meta)
                again = await client.call_tool("create_entities", ENTITY, meta=meta)
                graph = last(await client.call_tool("read_graph", {}))
            say(f"{url}: the retry -> deduplicated={again.meta['io.idem/deduplicated']}")
            check(reads(again) == reads(first) and len(last(again)) == 1, "the retry answers as the first did")
            check(len(graph["entities"]) == 1, "one entity")
        finally:
            proxy.send_signal(signal.SIGINT)
            proxy.wait(timeout=20)


def serving(command: list[str], env: dict) -> tuple[subprocess.Popen, str]:
    """Start `idem proxy --listen …` and wait for the address it prints."""
    proxy = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    for line in proxy.stderr:
        found = re.search(r"serving \S+ on (https?://\S+/mcp)", line)
        if found:
            return proxy, found.group(1)
    raise AssertionError("the proxy printed no address")


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}},
}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


async def callers_apart(url: str, alice: str, alice_again: str, bob: str) -> None:
    """The same unkeyed call over HTTP with bearer tokens of alice, alice
    again and bob: alice's repeat is answered from her record, and bob's
    call is his own."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    async def create_with(token: str) -> types.CallToolResult:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
        async with http, Client(streamable_http_client(url, http_client=http)) as client:
            return await client.call_tool("create_entities", ENTITY)

    results = [await create_with(token) for token in (alice, alice_again, bob)]
    flags = [r.meta.get("io.idem/deduplicated") for r in results]
    say(f"the same unkeyed call: alice, alice again, bob -> deduplicated {flags}")
    check(flags == [False, True, False], f"alice's repeat is hers; bob's call is his own: {flags}")


def namespaces(here: "Place") -> list[str]:
    """The namespaces of the records in `here`'s store."""
    listed = json.loads(here.idem("--json", "ls"))["records"]
    spaces = sorted({r["namespace"] for r in listed})
    say(f"records by namespace: {spaces}")
    return spaces


async def principals_over_http() -> None:
    say("\n## `idem proxy --listen --principals`: who calls, each in records of their own")
    import httpx2

    with place() as here:
        tokens, entries = {}, []
        for name in ("alice", "bob"):
            made = subprocess.run([IDEM, "principal", name], capture_output=True, text=True, check=True)
            tokens[name] = made.stderr.strip().splitlines()[-1]
            entries.append(made.stdout)
            check(tokens[name] not in made.stdout, "the entry holds the token's hash, not the token")
        principals = here.dir / "principals.toml"
        principals.write_text("\n".join(entries))
        env = {**os.environ, "IDEM_STORE": here.store, "MEMORY_FILE_PATH": str(here.dir / "memory.jsonl")}

        # Refused before any upstream starts.
        for listen, extra, words in [
            ("0.0.0.0:0", [], "not a loopback address"),
            ("127.0.0.1:0", [], "--no-auth"),
        ]:
            refused = subprocess.run(
                [IDEM, "proxy", "--listen", listen, *extra, "--", "/nonexistent/upstream"],
                env=env, capture_output=True, text=True,
            )
            say(f"--listen {listen} without --principals -> exit {refused.returncode}: {refused.stderr.strip()[:160]}")
            check(refused.returncode == 2 and words in refused.stderr, refused.stderr)
            check("did not initialize" not in refused.stderr, "no upstream was started")

        command = [IDEM, "proxy", "--listen", "127.0.0.1:0", "--principals", str(principals), "--", *npm_server("server-memory")]
        proxy, url = serving(command, env)
        try:
            port = url.split(":")[2].split("/")[0]
            async with httpx2.AsyncClient(timeout=10) as raw:
                cases = [
                    ("no token", {}, 401),
                    ("a wrong token", {"Authorization": "Bearer idem_" + "0" * 64}, 401),
                    ("another scheme", {"Authorization": f"Basic {tokens['alice']}"}, 401),
                    ("a foreign Origin", {"Authorization": f"Bearer {tokens['alice']}", "Origin": "http://127.0.0.1:9000"}, 403),
                    ("a rebinding Host", {"Authorization": f"Bearer {tokens['alice']}", "Host": f"evil.example:{port}"}, 403),
                    ("bare localhost Host", {"Authorization": f"Bearer {tokens['alice']}", "Host": "localhost"}, 403),
                ]
                for what, headers, status in cases:
                    answer = await raw.post(url, json=INITIALIZE, headers={**ACCEPT, **headers})
                    say(f"{what} -> HTTP {answer.status_code}")
                    check(answer.status_code == status, f"{what}: expected {status}, got {answer.status_code}: {answer.text[:200]}")
                    if status == 401:
                        check(answer.headers.get("www-authenticate", "").startswith("Bearer"), "401 names the scheme")
                        check(tokens["alice"] not in answer.text, "no token in the answer")
                lower = await raw.post(url, json=INITIALIZE, headers={**ACCEPT, "Authorization": f"bearer {tokens['bob']}"})
                check(lower.status_code == 200, f"the scheme in lower case is accepted: {lower.status_code}")

            await callers_apart(url, tokens["alice"], tokens["alice"], tokens["bob"])
        finally:
            proxy.send_signal(signal.SIGINT)
            proxy.wait(timeout=20)
        spaces = namespaces(here)
        check(spaces == ["mcp/memory-server/alice", "mcp/memory-server/bob"], f"one namespace per principal: {spaces}")
    TABLE.append(("--listen: alice's and bob's identical unkeyed call", "own effects", "-", "2"))


def hs256(payload: str, secret: bytes) -> str:
    """A JWT of `payload` (base64url) signed HS256 with `secret`, by hand:
    PyJWT rightly refuses to use a key as a shared secret."""
    import base64
    import hashlib
    import hmac

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    signed = b64(b'{"alg":"HS256","typ":"JWT","kid":"k1"}') + "." + payload
    return signed + "." + b64(hmac.new(secret, signed.encode(), hashlib.sha256).digest())


async def oauth_over_http() -> None:
    say("\n## `idem proxy --listen --oauth-issuer`: access tokens of an OAuth issuer, each subject in records of its own")
    import base64

    import httpx2

    resource = "https://mcp.example.test/mcp"
    issuer = Issuer()
    try:
        with place() as here:
            env = {**os.environ, "IDEM_STORE": here.store, "MEMORY_FILE_PATH": str(here.dir / "memory.jsonl")}
            # Refused before any upstream starts.
            for extra, words in [
                (["--oauth-issuer", "http://login.example.test", "--oauth-resource", resource], "https://"),
                (["--oauth-issuer", "http://127.0.0.1:1", "--oauth-resource", resource], "metadata cannot be read"),
            ]:
                refused = subprocess.run(
                    [IDEM, "proxy", "--listen", "127.0.0.1:0", *extra, "--", "/nonexistent/upstream"],
                    env=env, capture_output=True, text=True,
                )
                say(f"{' '.join(extra[:2])} -> exit {refused.returncode}: {refused.stderr.strip()[:200]}")
                check(refused.returncode == 2 and words in refused.stderr, refused.stderr)
                check("did not initialize" not in refused.stderr, "no upstream was started")

            command = [
                IDEM, "proxy", "--listen", "127.0.0.1:0",
                "--oauth-issuer", issuer.url, "--oauth-resource", resource,
                "--", *npm_server("server-memory"),
            ]
            proxy, url = serving(command, env)
            try:
                base = url.rsplit("/mcp", 1)[0]
                async with httpx2.AsyncClient(timeout=10) as raw:
                    for path in ("/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"):
                        metadata = await raw.get(base + path)
                        say(f"GET {path} (no token) -> HTTP {metadata.status_code} {metadata.text}")
                        check(metadata.status_code == 200, "the metadata is public")
                        check(metadata.json() == {
                            "resource": resource, "authorization_servers": [issuer.url], "bearer_methods_supported": ["header"],
                        }, metadata.text)

                    alice = issuer.token("alice", resource)
                    header, payload, _ = alice.split(".")
                    unsigned = base64.urlsafe_b64encode(b'{"alg":"none","typ":"JWT"}').rstrip(b"=").decode() + "." + payload + "."
                    # HS256 keyed with the published key's text: the classic
                    # confusion of a public key for a shared secret.
                    confused = hs256(payload, json.dumps(issuer.jwks["keys"][0]).encode())
                    cases = [
                        ("no token", None, "resource_metadata"),
                        ("not a JWT", "idem_" + "0" * 64, "not a signed JWT"),
                        ("expired", issuer.token("alice", resource, expires_in=-3600), "expired"),
                        ("for another resource", issuer.token("alice", "https://other.example.test/mcp"), "another resource"),
                        ("from another issuer", issuer.token("alice", resource, issuer="https://evil.example.test"), "another issuer"),
                        ("signed by a key the issuer does not publish, under its kid", issuer.token("alice", resource, key=issuer.stranger), "does not verify"),
                        ("naming a key the issuer does not publish", issuer.token("alice", resource, key=issuer.stranger, kid="k9"), "does not publish"),
                        ("alg none", unsigned, "not a signed JWT"),
                        ("HS256 with the public key as the secret", confused, "asymmetric"),
                    ]
                    for what, token, words in cases:
                        headers = {**ACCEPT, **({"Authorization": f"Bearer {token}"} if token else {})}
                        answer = await raw.post(url, json=INITIALIZE, headers=headers)
                        challenge = answer.headers.get("www-authenticate", "")
                        say(f"{what} -> HTTP {answer.status_code}; WWW-Authenticate: {challenge}")
                        check(answer.status_code == 401, f"{what}: {answer.status_code}")
                        check(f'resource_metadata="https://mcp.example.test/.well-known/oauth-protected-resource/mcp"' in challenge, challenge)
                        check(words in challenge, f"{what}: the reason is said: {challenge}")
                        check(token is None or token not in answer.text + challenge, "no token in the answer")
                    fetches = issuer.key_fetches
                    for _ in range(5):
                        await raw.post(url, json=INITIALIZE, headers={**ACCEPT, "Authorization": "Bearer " + issuer.token("x", resource, key=issuer.stranger, kid="k9")})
                    say(f"five more tokens naming an unknown key -> key set fetched {issuer.key_fetches - fetches} more times")
                    check(issuer.key_fetches - fetches == 0, "unknown keys fetch the key set at most every 30 s")
                    accepted = await raw.post(url, json=INITIALIZE, headers={**ACCEPT, "Authorization": f"Bearer {alice}"})
                    say(f"a valid token -> HTTP {accepted.status_code}")
                    check(accepted.status_code == 200, accepted.text[:200])

                # Alice's second call with a token of its own: the subject
                # is the caller, not the token.
                alice, bob = "alice@example.test", "bob@example.test"
                await callers_apart(
                    url, issuer.token(alice, resource), issuer.token(alice, resource, expires_in=600),
                    issuer.token(bob, resource),
                )
            finally:
                proxy.send_signal(signal.SIGINT)
                proxy.wait(timeout=20)
            spaces = namespaces(here)
            check(spaces == ["mcp/memory-server/oauth/alice@example.test", "mcp/memory-server/oauth/bob@example.test"], f"one namespace per subject: {spaces}")
    finally:
        issuer.close()
    TABLE.append(("--listen --oauth-issuer: two subjects' identical unkeyed call", "own effects", "-", "2"))


class Balancer:
    """A round-robin HTTP balancer on loopback, as teams put in front of
    several instances: each new MCP session goes to the next instance,
    and stays there (sticky by `mcp-session-id`, the header rmcp's and the
    SDK's sessions are named by). The `Host` it forwards is the
    instance's own, as a reverse proxy sets it."""

    def __init__(self, backends: list[str]) -> None:
        import threading

        import httpx2
        import uvicorn
        from starlette.applications import Starlette
        from starlette.responses import Response, StreamingResponse
        from starlette.routing import Route

        self.backends = backends
        self.sessions: dict[str, str] = {}
        self.sent: list[str] = []
        self.next = 0
        balancer = self

        async def forward(request):
            session = request.headers.get("mcp-session-id")
            if session in balancer.sessions:
                backend = balancer.sessions[session]
            else:
                backend = balancer.backends[balancer.next % len(balancer.backends)]
            balancer.sent.append(backend)
            headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
            client = httpx2.AsyncClient(timeout=60)
            upstream = await client.send(
                client.build_request(request.method, backend + "/mcp", headers=headers, content=await request.body()),
                stream=True,
            )
            made = upstream.headers.get("mcp-session-id")
            if made is not None and made not in balancer.sessions:
                # A new session: the next one goes to the next instance.
                balancer.sessions[made] = backend
                balancer.next += 1
            passed = {k: v for k, v in upstream.headers.items() if k.lower() not in ("content-length", "transfer-encoding", "connection")}

            async def body():
                try:
                    async for chunk in upstream.aiter_raw():
                        yield chunk
                finally:
                    await upstream.aclose()
                    await client.aclose()

            if upstream.headers.get("content-type", "").startswith("text/event-stream"):
                return StreamingResponse(body(), status_code=upstream.status_code, headers=passed)
            content = b"".join([chunk async for chunk in body()])
            return Response(content, status_code=upstream.status_code, headers=passed)

        app = Starlette(routes=[Route("/mcp", forward, methods=["GET", "POST", "DELETE"])])
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}/mcp"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True).start()
        while not self.server.started:
            time.sleep(0.02)

    def close(self) -> None:
        self.server.should_exit = True


async def two_instances() -> None:
    say("\n## two `idem proxy --listen` on one PostgreSQL behind a round-robin balancer: one record space")
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    # A schema of its own: a store no earlier run wrote to.
    server = os.environ["IDEM_TWO_INSTANCES_STORE"]
    store = f"{server}{'&' if '?' in server else '?'}schema=two_instances_{os.getpid()}_{int(time.time())}"
    with place() as here:
        here.store = store
        made = subprocess.run([IDEM, "principal", "alice"], capture_output=True, text=True, check=True)
        token = made.stderr.strip().splitlines()[-1]
        principals = here.dir / "principals.toml"
        principals.write_text(made.stdout)
        config = here.dir / "proxy.toml"
        config.write_text(CRASH_CONFIG.format(cls="irreversible"))
        upstream = SlowUpstream(here)
        upstream.start()
        env = {**os.environ, "IDEM_STORE": store}
        secret = here.dir / "state.secret"
        secret.write_bytes(os.urandom(32))
        instances = [
            serving([IDEM, "proxy", "--listen", "127.0.0.1:0", "--principals", str(principals),
                     "--config", str(config), "--state-secret-file", str(secret),
                     "--upstream", upstream.url], env)
            for _ in range(2)
        ]
        balancer = Balancer([url.rsplit("/mcp", 1)[0] for _, url in instances])
        try:
            async def call(arguments: dict, meta: dict | None = None) -> tuple[types.CallToolResult, str]:
                """The call in a session of its own, through the balancer:
                the result, and the instance that served it."""
                http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
                async with http, Client(streamable_http_client(balancer.url, http_client=http)) as client:
                    result = await client.call_tool("append", arguments, meta=meta)
                return result, balancer.sent[-1]

            for keying, meta in [("keyed", {"io.idem/idempotencyKey": "two-instances-1"}), ("unkeyed", None)]:
                line = {"line": keying}
                asked, first = await call(line, meta)
                key = (asked.meta or {}).get("io.idem/key")
                say(f"{keying}: asked through {first} -> pending={asked.is_error}, key {str(key)[:12]}…")
                check(asked.is_error and key, f"awaiting approval, its key in _meta: {reads(asked)!r}")
                check(not upstream.starts() or all(keying not in s for s in upstream.starts()), "nothing ran before the approval")
                here.idem("approve", key, "--by", "ops")
                ran, second = await call(line, meta)
                again, third = await call(line, meta)
                say(f"{keying}: approved; sent again through {second} -> {reads(ran)!r}; and through {third} -> deduplicated {again.meta.get('io.idem/deduplicated')}")
                check(len({first, second, third}) == 2, f"the balancer spread them: {first}, {second}, {third}")
                check(first != second, "the decision made on one instance's request is seen by the other")
                check(not ran.is_error and again.meta.get("io.idem/deduplicated") is True, f"{reads(ran)!r} / {reads(again)!r}")
                runs = [s for s in upstream.starts() if f" {keying} " in s + " "]
                check(len(runs) == 1, f"{keying}: the upstream ran it once: {upstream.starts()}")

            # A client that takes MCP tasks: the task made through one
            # instance is carried on through the other (one state secret).
            auth = {"Authorization": f"Bearer {token}"}
            (_, a_url), (_, b_url) = instances
            async with httpx2.AsyncClient(timeout=30) as http:
                on_a = await task_session(http, a_url, auth)
                made, _ = await rpc(http, a_url, {
                    "jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": "append", "arguments": {"line": "tasked"}},
                }, on_a, auth)
                task = made["result"]
                say(f"tasks: asked through A -> {task.get('resultType')} {task.get('status')}: {task.get('statusMessage')!r}")
                check(task.get("resultType") == "task" and task["status"] == "working", json.dumps(made)[:300])
                here.idem("approve", task["_meta"]["io.idem/key"], "--by", "ops")
                on_b = await task_session(http, b_url, auth)
                result, polls = await poll_task(http, b_url, on_b, task["taskId"], auth)
                say(f"tasks: approved; tasks/get through B, {polls} poll(s) -> {result['status']}: {result['result']['content'][0]['text']!r}")
                check(not result["result"].get("isError"), json.dumps(result)[:300])
                check(result["result"]["content"][0]["text"] == "appended tasked", "the upstream's result as it came")
                runs = [s for s in upstream.starts() if " tasked" in s]
                check(len(runs) == 1, f"tasked: the upstream ran it once: {upstream.starts()}")
        finally:
            balancer.close()
            for process, _ in instances:
                process.send_signal(signal.SIGINT)
                process.wait(timeout=20)
            upstream.close()
    TABLE.append(("two instances behind a balancer, approved between them", "runs upstream", "-", "1 + 1"))


async def upstream_error() -> None:
    say("\n## an upstream's own error (isError) is recorded as a failure, and its repeat told so")
    with place() as here:
        env = {"MEMORY_FILE_PATH": str(here.dir / "memory.jsonl")}
        async with here.proxied(npm_server("server-memory"), env=env) as client:
            bad = {"entities": "not a list"}
            first = await client.call_tool("create_entities", bad)
            again = await client.call_tool("create_entities", bad)
        say(f"first -> error={first.is_error} dedup={first.meta.get('io.idem/deduplicated')}: {reads(first)[:120]!r}")
        say(f"again -> error={again.is_error} dedup={again.meta.get('io.idem/deduplicated')}: {reads(again)[:160]!r}")
        check(first.is_error and not first.meta["io.idem/deduplicated"], "the first call: the upstream's error")
        check(not reads(first).startswith("An identical"), f"the first call reads as the upstream said: {reads(first)!r}")
        check(again.is_error and again.meta["io.idem/deduplicated"], "the repeat: the recorded error")
        check(reads(again).startswith("An identical earlier call of `create_entities` failed"), reads(again))
        check("use it as this call's result" not in reads(again), reads(again))
        listed = json.loads(here.idem("--json", "ls"))["records"]
        check([r["status"] for r in listed] == ["failed"], f"recorded as failed: {listed}")


async def config_checked() -> None:
    say("\n## a configuration entry the upstream has no tool for is refused at start")
    with place() as here:
        config = here.dir / "proxy.toml"
        config.write_text('[tools.create_entites]\nclass = "non_idempotent_write"\n')
        env = {**os.environ, "IDEM_STORE": here.store, "MEMORY_FILE_PATH": str(here.dir / "memory.jsonl")}
        refused = subprocess.run(
            [IDEM, "proxy", "--config", str(config), "--", *npm_server("server-memory")],
            env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60,
        )
        say(f"[tools.create_entites] -> exit {refused.returncode}: {refused.stderr.strip()}")
        check(refused.returncode == 2, f"refused as a usage error: {refused.returncode}")
        check("did you mean `create_entities`" in refused.stderr, refused.stderr)

        config.write_text("[server]\nmax_argument_bytes = 200\n")
        async with here.proxied(npm_server("server-memory"), env=env, config=config.read_text()) as client:
            big = {"entities": [{"name": "x" * 300, "entityType": "person", "observations": []}]}
            refused = await client.call_tool("create_entities", big)
            graph = last(await client.call_tool("read_graph", {}))
        say(f"arguments over [server] max_argument_bytes -> {reads(refused)!r}")
        check(refused.is_error and "more than the 200 this server accepts" in reads(refused), reads(refused))
        check(graph["entities"] == [], "nothing ran")


async def operator_approval() -> None:
    say("\n## server-memory: `delete_entities` (irreversible) from a client that cannot ask its user")
    with place() as here:
        env = {"MEMORY_FILE_PATH": str(here.dir / "memory.jsonl")}
        command = npm_server("server-memory")
        why = "Ada wrote: <b>forget me</b>\u202e"
        meta = {"io.idem/idempotencyKey": "forget-ada-1", "io.idem/reason": why}
        forget = {"entityNames": ["Ada"]}
        async with here.proxied(command, env=env) as client:
            await client.call_tool("create_entities", ENTITY)
            waiting = await client.call_tool("delete_entities", forget, meta=meta)
            graph = last(await client.call_tool("read_graph", {}))
            say(f"the model reads:\n  {reads(waiting)}")
            check(waiting.is_error and len(graph["entities"]) == 1, "nothing deleted before a person decides")
        listed = json.loads(here.idem("--json", "ls", "--state", "awaiting_approval"))["records"]
        check(len(listed) == 1 and listed[0]["tool"] == "delete_entities", f"the inbox shows it: {listed}")
        check(listed[0]["namespace"] == "mcp/memory-server", "named after the upstream server")
        check(listed[0]["reason"] == why, f"with the reason the client gave: {listed[0]['reason']!r}")
        shown = here.idem("show", listed[0]["key"])
        check("Reason:       Ada wrote: <b>forget me</b>\\u{202e}\n" in shown, f"idem show escapes it: {shown}")
        here.idem("approve", listed[0]["key"], "--by", "ops", "--note", "Ada asked to be forgotten")
        say(f"idem approve {listed[0]['key'][:12]}… --by ops")
        async with here.proxied(command, env=env) as client:
            done = await client.call_tool("delete_entities", forget, meta=meta)
            graph = last(await client.call_tool("read_graph", {}))
            say(f"the call sent again after the approval -> {reads(done)!r}")
            check(not done.is_error and graph["entities"] == [], "approved: deleted once")


async def everything() -> None:
    say("\n## server-everything: what is not a write passes through as it is")
    seen = {}
    for proxied in (False, True):
        with place() as here:
            command = npm_server("server-everything", "stdio")
            client = here.proxied(command) if proxied else here.direct(command)
            async with client:
                capabilities = client.server_capabilities
                tools = (await client.list_tools()).tools
                resources = (await client.list_resources()).resources
                templates = (await client.list_resource_templates()).resource_templates
                document = await client.read_resource(resources[0].uri)
                # Advertised by the upstream, so served through the proxy.
                subscribes = bool(capabilities.resources and capabilities.resources.subscribe)
                if subscribes:
                    await client.subscribe_resource(resources[0].uri)
                    await client.unsubscribe_resource(resources[0].uri)
                prompts = (await client.list_prompts()).prompts
                prompt = await client.get_prompt("args-prompt", {"city": "Lyon"})
                echo = await client.call_tool("echo", {"message": "hello"})
                structured = await client.call_tool("get-structured-content", {"location": "Chicago"})
                image = await client.call_tool("get-tiny-image", {})
                # Two calls under way at once, each asking for progress:
                # each hears only its own steps.
                steps: dict[int, list[float]] = {2: [], 3: []}

                def progress_of(n: int):
                    async def progress(done: float, total: float | None, message: str | None) -> None:
                        steps[n].append(done)

                    return progress

                slow = await asyncio.gather(
                    *(
                        client.call_tool(
                            "trigger-long-running-operation",
                            {"duration": 0.3, "steps": n},
                            progress_callback=progress_of(n),
                        )
                        for n in (2, 3)
                    )
                )
                slow = [reads(result) for result in slow]
            seen[proxied] = {
                "capabilities": sorted(
                    k for k in ("prompts", "resources", "tools", "completions", "logging")
                    if getattr(capabilities, k) is not None
                ),
                "tools": [t.name for t in tools],
                "resources": [r.uri for r in resources],
                "templates": [t.uri_template for t in templates],
                "document": document.model_dump(exclude={"meta"}),
                "subscribes": subscribes,
                "prompts": [p.name for p in prompts],
                "prompt": prompt.model_dump(exclude={"meta"}),
                "echo": reads(echo),
                "structured": structured.structured_content,
                "image": [block.type for block in image.content],
                "progress": steps,
                "slow": slow,
            }
            if proxied:
                classes = {t.name: (t.meta or {}).get("io.idem/class") for t in tools}
                say(f"through the proxy each tool carries its class: {classes}")
                check(all(classes.values()), "every listed tool names its class")
    check(all(len(seen[False]["progress"][n]) == n for n in (2, 3)), f"the upstream reports progress: {seen[False]['progress']}")
    for what, direct in seen[False].items():
        check(seen[True][what] == direct, f"{what}: {seen[True][what]!r} through the proxy, {direct!r} directly")
    say(
        f"the same through the proxy as directly: capabilities {seen[True]['capabilities']}, "
        f"{len(seen[True]['tools'])} tools, {len(seen[True]['resources'])} resources, "
        f"{len(seen[True]['templates'])} templates, {len(seen[True]['prompts'])} prompts, a prompt, "
        f"a resource read, echo, structured content, an image, progress {seen[True]['progress']}"
    )


CRASH_CONFIG = """
[tools.append]
class = "{cls}"
"""


async def judge_crash(cls: str, client: Client, meta: dict, result: types.CallToolResult, journal: Path) -> int:
    """What a call of `append` whose upstream was killed mid-call answered,
    and what the upstream's journal shows, for the class `cls`; the number
    of runs upstream."""
    lines = journal.read_text().splitlines()
    starts = [line for line in lines if line.startswith("start x")]
    say(f"the call -> error={result.is_error} {reads(result)[:400]!r}")
    say(f"the upstream's journal: {lines}")
    if cls == "idempotent_write":
        check(not result.is_error, "an idempotent write is re-run on the new upstream")
        check(len(starts) == 2 and len(set(starts)) == 1, "re-run with the same key")
        check(starts[0].split()[-1] != "-", "the key reached the upstream in _meta")
        check(lines.count("done x") == 1, "and finishes once")
    else:
        check(result.is_error, "a non-idempotent write's outcome is unknown")
        check(result.meta["io.idem/error"]["code"] == "outcome_unknown", "refused as unknown")
        again = await client.call_tool("append", {"line": "x"}, meta=meta)
        check(again.is_error and len(journal.read_text().splitlines()) == 1, "never re-run")
        say(f"retried -> {reads(again)[:160]!r}")
    return len(starts)


async def crash(cls: str) -> None:
    say(f"\n## an upstream killed mid-call and started again: `append` as {cls}")
    with place() as here:
        journal, hold, pid = here.dir / "journal", here.dir / "hold", here.dir / "pid"
        env = {
            "SLOW_UPSTREAM_JOURNAL": str(journal),
            "SLOW_UPSTREAM_HOLD": str(hold),
            "SLOW_UPSTREAM_PID": str(pid),
        }
        command = [sys.executable, str(HERE / "slow_upstream.py")]
        async with here.proxied(command, env=env, config=CRASH_CONFIG.format(cls=cls)) as client:
            hold.touch()
            meta = {"io.idem/idempotencyKey": f"crash-{cls}"}
            call = asyncio.create_task(client.call_tool("append", {"line": "x"}, meta=meta))
            while not (journal.exists() and "start x" in journal.read_text()):
                await asyncio.sleep(0.02)
            hold.unlink()
            os.kill(int(pid.read_text()), signal.SIGKILL)
            runs = await judge_crash(cls, client, meta, await call, journal)
            TABLE.append((f"upstream killed mid-call: {cls}", "runs upstream (same key)", "-", str(runs)))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Everything:
    """server-everything in its streamable HTTP mode on a loopback port,
    which it keeps when restarted."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.server: subprocess.Popen | None = None

    def start(self) -> None:
        env = {**os.environ, "PORT": str(self.port)}
        quiet = subprocess.DEVNULL
        self.server = subprocess.Popen(npm_server("server-everything", "streamableHttp"), env=env, stdout=quiet, stderr=quiet)
        # Until it listens (or has exited).
        while self.server.poll() is None:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    break
            time.sleep(0.05)
        check(self.server.poll() is None, "server-everything started over HTTP")

    def stop(self) -> None:
        if self.server is not None:
            self.server.kill()
            self.server.wait(timeout=20)


@contextlib.contextmanager
def everything_over_http():
    """server-everything in its streamable HTTP mode on a free loopback
    port; yields the running server."""
    server = Everything()
    server.start()
    try:
        yield server
    finally:
        server.stop()


class SlowUpstream:
    """slow_upstream.py over streamable HTTP on a listening socket this
    process holds: killed and started again, it keeps its address, and a
    connection made in between waits rather than being refused."""

    def __init__(self, here: Place, env: dict[str, str] | None = None, scheme: str = "http") -> None:
        self.journal, self.hold, self.pid = here.dir / "journal", here.dir / "hold", here.dir / "pid"
        self.listen(0)
        self.url = f"{scheme}://127.0.0.1:{self.socket.getsockname()[1]}/mcp"
        self.process: subprocess.Popen | None = None
        self.env = env or {}

    def listen(self, port: int) -> None:
        """A listening socket on `port`; the same port again once the old
        one is closed (its connections, which inherit the option, do not
        hold it)."""
        self.socket = socket.socket()
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind(("127.0.0.1", port))
        self.socket.listen(64)

    def start(self) -> None:
        env = {
            **os.environ,
            "SLOW_UPSTREAM_JOURNAL": str(self.journal),
            "SLOW_UPSTREAM_HOLD": str(self.hold),
            "SLOW_UPSTREAM_PID": str(self.pid),
            "SLOW_UPSTREAM_FD": str(self.socket.fileno()),
            **self.env,
        }
        command = [sys.executable, str(HERE / "slow_upstream.py")]
        self.process = subprocess.Popen(command, env=env, pass_fds=[self.socket.fileno()])

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=20)

    def starts(self) -> list[str]:
        if not self.journal.exists():
            return []
        return [line for line in self.journal.read_text().splitlines() if line.startswith("start")]

    def close(self) -> None:
        self.kill()
        self.socket.close()


async def upstream_over_http() -> None:
    say("\n## `idem proxy --upstream URL`: upstream servers reached over streamable HTTP")
    with everything_over_http() as server:
        url = server.url
        async with Client(url) as client:
            direct = sorted(t.name for t in (await client.list_tools()).tools)
        with place() as here:
            async with here.through(url) as client:
                tools = (await client.list_tools()).tools
                echo = await client.call_tool("echo", {"message": "over http"})
            classes = {t.name: (t.meta or {}).get("io.idem/class") for t in tools}
            check(sorted(classes) == direct, f"the same tools through the proxy: {sorted(classes)} / {direct}")
            check(all(classes.values()), f"each listed with its class: {classes}")
            check(reads(echo) == "Echo: over http", f"echo answers: {reads(echo)!r}")
            say(f"server-everything at {url}: {len(tools)} tools listed through the proxy, echo -> {reads(echo)!r}")

    counts = []
    for proxied in (False, True):
        with place() as here:
            upstream = SlowUpstream(here)
            upstream.start()
            try:
                client = here.through(upstream.url) if proxied else Client(upstream.url)
                async with client:
                    meta = {"io.idem/idempotencyKey": "append-http-1"}
                    first = await client.call_tool("append", {"line": "x"}, meta=meta)
                    again = await client.call_tool("append", {"line": "x"}, meta=meta)
                runs = len(upstream.starts())
                counts.append(str(runs))
                route = "through idem proxy" if proxied else "directly"
                say(f"{route}: `append` sent twice with one key -> {runs} run(s) upstream")
                if proxied:
                    check(runs == 1, "through the proxy the upstream runs once")
                    check(again.meta["io.idem/deduplicated"], "the repeat is answered from the record")
                    check(reads(again) == reads(first), "the repeat answers as the first did")
                    ls = here.idem("ls", "--namespace", "mcp/slow-upstream")
                    check("append" in ls, f"the record names the upstream server:\n{ls}")
                else:
                    check(runs == 2, "directly it runs twice")
            finally:
                upstream.close()
    TABLE.append(("HTTP upstream: append, resent", "runs upstream", *counts))



async def restarted_everything() -> None:
    say("\n## server-everything restarted under the proxy (it answers a session it forgot with 400)")
    config = """
[tools.echo]
class = "non_idempotent_write"
"""
    with everything_over_http() as server, place() as here:
        async with here.through(server.url, config=config) as client:
            first = await client.call_tool("echo", {"message": "before"})
            check(reads(first) == "Echo: before", f"echo answers: {reads(first)!r}")
            server.stop()
            server.start()
            started = time.monotonic()
            with anyio.fail_after(20):
                again = await client.call_tool("echo", {"message": "after"})
            took = time.monotonic() - started
            say(f"after the restart -> error={again.is_error} in {took:.2f} s: {reads(again)[:120]!r}")
            check(not again.is_error and reads(again) == "Echo: after", f"the new session serves it: {reads(again)!r}")
            check(took < 10, f"answered at once, not after a timeout: {took:.1f} s")
            ls = here.idem("ls", "--json")
            check('"unknown"' not in ls, f"nothing recorded as unknown:\n{ls}")
    TABLE.append(("HTTP upstream restarted (answers 400)", "answered, not unknown", "-", "yes"))


async def long_calls() -> None:
    say("\n## long calls: progress starts a call's timeout again, silence ends it")
    config = """
[tools.trigger-long-running-operation]
class = "read"
timeout = "2s"
"""
    with everything_over_http() as server, place() as here:
        async with here.through(server.url, config=config) as client:
            # 4 s with progress every second, under a 2 s timeout.
            started = time.monotonic()
            long = await client.call_tool("trigger-long-running-operation", {"duration": 4, "steps": 4})
            took = time.monotonic() - started
            say(f"4 s with progress each second, timeout 2 s -> error={long.is_error} in {took:.1f} s: {reads(long)[:90]!r}")
            check(not long.is_error and "completed" in reads(long), f"it runs to the end: {reads(long)!r}")
            # 3 s in one step: 3 s of silence, over the 2 s timeout.
            silent = await client.call_tool("trigger-long-running-operation", {"duration": 3, "steps": 1})
            say(f"3 s without progress, timeout 2 s -> error={silent.is_error}: {reads(silent)[:220]!r}")
            check(silent.is_error and "neither its result nor progress for 2 seconds" in reads(silent), reads(silent))
            check("safe to call it again" in reads(silent), f"a read may be called again: {reads(silent)!r}")
            check("Do not call it again" not in reads(silent), reads(silent))

            # Two identical calls at once, each with its own progress.
            seen: dict[str, list[float]] = {"a": [], "b": []}

            def to(who: str):
                async def callback(progress: float, total: float | None, message: str | None) -> None:
                    seen[who].append(progress)
                return callback

            args = {"duration": 1, "steps": 4}
            await asyncio.gather(
                client.call_tool("trigger-long-running-operation", args, progress_callback=to("a")),
                client.call_tool("trigger-long-running-operation", args, progress_callback=to("b")),
            )
            say(f"two identical calls at once -> progress a={seen['a']} b={seen['b']}")
            check(seen["a"] == [1, 2, 3, 4] and seen["b"] == [1, 2, 3, 4], f"each its own stream: {seen}")
    TABLE.append(("long call with progress (read, timeout 2 s)", "completes", "-", "yes"))


def make_certificates(directory: Path) -> tuple[Path, Path, Path, Path]:
    """A CA, and a certificate it signed for 127.0.0.1: (ca, cert, key,
    another CA that signed nothing), as PEM files in `directory`."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    import ipaddress

    now = datetime.datetime.now(datetime.timezone.utc)

    def ca(name: str):
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        cert = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
            .sign(key, hashes.SHA256())
        )
        return key, cert

    ca_key, ca_cert = ca("idem test CA")
    _, other_ca = ca("another CA")
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = [directory / n for n in ("ca.pem", "cert.pem", "key.pem", "other-ca.pem")]
    paths[0].write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    paths[3].write_bytes(other_ca.public_bytes(serialization.Encoding.PEM))
    return paths[0], paths[1], paths[2], paths[3]


async def https_upstream() -> None:
    say("\n## `idem proxy --upstream https://…`: TLS verified, and a bearer token from a file")
    with place() as here:
        ca, cert, key, other_ca = make_certificates(here.dir)
        token = "upstream-secret-" + "7" * 20
        token_file = here.dir / "token"
        token_file.write_text(token + "\n")
        env = {"SLOW_UPSTREAM_CERT": str(cert), "SLOW_UPSTREAM_KEY": str(key), "SLOW_UPSTREAM_TOKEN": token}
        upstream = SlowUpstream(here, env=env, scheme="https")
        upstream.start()
        try:
            def through(ca_file: Path, token_args: list[str]) -> Client:
                args = ["proxy", "--upstream", upstream.url, *token_args]
                server = StdioServerParameters(
                    command=IDEM, args=args, env={"IDEM_STORE": here.store, "IDEM_TLS_CA_FILE": str(ca_file)}
                )
                return Client(server)

            # Until the server has its certificate loaded.
            for _ in range(100):
                with socket.socket() as probe:
                    if probe.connect_ex(("127.0.0.1", int(upstream.url.split(":")[2].split("/")[0]))) == 0:
                        break
                time.sleep(0.05)
            async with through(ca, ["--upstream-token-file", str(token_file)]) as client:
                meta = {"io.idem/idempotencyKey": "tls-1"}
                first = await client.call_tool("append", {"line": "x"}, meta=meta)
                again = await client.call_tool("append", {"line": "x"}, meta=meta)
            say(f"over https with the test CA and the token -> {reads(first)!r}, repeat deduplicated={again.meta['io.idem/deduplicated']}")
            check(reads(first) == "appended x" and again.meta["io.idem/deduplicated"], reads(first))
            check(len(upstream.starts()) == 1, "it ran once")

            # A CA that did not sign the server's certificate: refused, nothing sent.
            refused = subprocess.run(
                [IDEM, "proxy", "--upstream", upstream.url, "--upstream-token-file", str(token_file)],
                env={**os.environ, "IDEM_STORE": here.store, "IDEM_TLS_CA_FILE": str(other_ca)},
                capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60,
            )
            say(f"with another CA -> exit {refused.returncode}: {refused.stderr.strip()[:300]}")
            check(refused.returncode != 0 and "IDEM_TLS_CA_FILE" in refused.stderr, refused.stderr)
            check(token not in refused.stderr, "the token is never printed")
            check(len(upstream.starts()) == 1, "nothing more ran")

            # The right CA but no token: the upstream's 401, said.
            unauthorized = subprocess.run(
                [IDEM, "proxy", "--upstream", upstream.url],
                env={**os.environ, "IDEM_STORE": here.store, "IDEM_TLS_CA_FILE": str(ca)},
                capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60,
            )
            say(f"without the token -> exit {unauthorized.returncode}: {unauthorized.stderr.strip()[:200]}")
            check(unauthorized.returncode != 0 and "401" in unauthorized.stderr, unauthorized.stderr)
        finally:
            upstream.close()
    TABLE.append(("HTTPS upstream with a private CA and a token", "runs upstream", "-", "1"))


async def https_listen() -> None:
    say("\n## `idem proxy --listen --tls-cert --tls-key`: served over HTTPS to the Python SDK")
    import ssl

    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    with place() as here:
        ca, cert, key, other_ca = make_certificates(here.dir)
        made = subprocess.run([IDEM, "principal", "alice"], capture_output=True, text=True, check=True)
        token = made.stderr.strip().splitlines()[-1]
        principals = here.dir / "principals.toml"
        principals.write_text(made.stdout)
        env = {**os.environ, "IDEM_STORE": here.store, "MEMORY_FILE_PATH": str(here.dir / "memory.jsonl")}

        # Off loopback, plain HTTP is refused before any upstream starts;
        # a key that does not go with the certificate is named.
        for listen, extra, words in [
            ("0.0.0.0:0", ["--principals", str(principals)], "--tls-cert FILE --tls-key FILE"),
            ("127.0.0.1:0", ["--no-auth", "--tls-cert", str(cert), "--tls-key", str(ca)], "--tls-key"),
        ]:
            refused = subprocess.run(
                [IDEM, "proxy", "--listen", listen, *extra, "--", "/nonexistent/upstream"],
                env=env, capture_output=True, text=True,
            )
            say(f"--listen {listen} {' '.join(extra[:1])} -> exit {refused.returncode}: {refused.stderr.strip()[:200]}")
            check(refused.returncode == 2 and words in refused.stderr, refused.stderr)
            check("did not initialize" not in refused.stderr, "no upstream was started")
            check("PRIVATE KEY" not in refused.stderr, "no key content in the message")

        tls = ["--tls-cert", str(cert), "--tls-key", str(key)]
        command = [IDEM, "proxy", "--listen", "127.0.0.1:0", "--principals", str(principals), *tls, "--", *npm_server("server-memory")]
        proxy, url = serving(command, env)
        try:
            check(url.startswith("https://"), f"the address printed is https: {url}")
            trusted = ssl.create_default_context(cafile=str(ca))
            untrusted = ssl.create_default_context(cafile=str(other_ca))
            async with httpx2.AsyncClient(verify=untrusted, timeout=10) as raw:
                try:
                    await raw.post(url, json=INITIALIZE, headers=ACCEPT)
                    check(False, "a client that does not trust the CA got through")
                except httpx2.ConnectError as e:
                    say(f"a client trusting another CA -> {type(e).__name__}")
            async with httpx2.AsyncClient(timeout=10) as raw:
                try:
                    plain = await raw.post(url.replace("https://", "http://"), json=INITIALIZE, headers=ACCEPT)
                    check(False, f"plain HTTP got an answer: {plain.status_code}")
                except httpx2.HTTPError as e:
                    say(f"plain HTTP to the HTTPS port -> {type(e).__name__}")
            async with httpx2.AsyncClient(verify=trusted, timeout=10) as raw:
                # Signed in, so the refusal is the Origin's, not a missing token's.
                origin = {"Origin": "http://" + url.split("/")[2], "Authorization": f"Bearer {token}"}
                answer = await raw.post(url, json=INITIALIZE, headers={**ACCEPT, **origin})
                check(answer.status_code == 403, f"the http:// Origin of an https server is foreign: {answer.status_code}")

            async def create() -> types.CallToolResult:
                http = httpx2.AsyncClient(verify=trusted, headers={"Authorization": f"Bearer {token}"}, timeout=30)
                async with http, Client(streamable_http_client(url, http_client=http)) as client:
                    return await client.call_tool("create_entities", ENTITY, meta={"io.idem/idempotencyKey": "tls-listen-1"})

            first = await create()
            again = await create()
            say(f"over https, the call and its repeat -> deduplicated {[first.meta.get('io.idem/deduplicated'), again.meta.get('io.idem/deduplicated')]}")
            check(not first.is_error and again.meta.get("io.idem/deduplicated") is True, reads(first))
        finally:
            proxy.send_signal(signal.SIGINT)
            proxy.wait(timeout=20)
    TABLE.append(("--listen over HTTPS: a call and its repeat", "own effects", "-", "1"))


async def crash_http(cls: str) -> None:
    say(f"\n## an HTTP upstream killed mid-call and started again: `append` as {cls}")
    with place() as here:
        upstream = SlowUpstream(here)
        upstream.start()
        try:
            async with here.through(upstream.url, config=CRASH_CONFIG.format(cls=cls)) as client:
                upstream.hold.touch()
                meta = {"io.idem/idempotencyKey": f"crash-http-{cls}"}
                call = asyncio.create_task(client.call_tool("append", {"line": "x"}, meta=meta))
                while not upstream.starts():
                    await asyncio.sleep(0.02)
                upstream.hold.unlink()
                upstream.kill()
                upstream.start()
                runs = await judge_crash(cls, client, meta, await call, upstream.journal)
                # The new session serves the next call.
                other = await client.call_tool("append", {"line": "y"})
                check(not other.is_error, f"the next call runs on a new session: {reads(other)!r}")
            TABLE.append((f"HTTP upstream killed mid-call: {cls}", "runs upstream (same key)", "-", str(runs)))
        finally:
            upstream.close()


async def refused_http() -> None:
    say("\n## an HTTP upstream that refuses the connection: nothing was sent")
    with place() as here:
        upstream = SlowUpstream(here)
        port = upstream.socket.getsockname()[1]
        upstream.start()
        try:
            config = CRASH_CONFIG.format(cls="non_idempotent_write")
            async with here.through(upstream.url, config=config) as client:
                # The server and its address gone: connections are refused.
                upstream.close()
                meta = {"io.idem/idempotencyKey": "refused-1"}
                refused = await client.call_tool("append", {"line": "x"}, meta=meta)
                code = (refused.meta or {}).get("io.idem/error", {}).get("code")
                say(f"the call -> error={refused.is_error} code={code} {reads(refused)[:200]!r}")
                check(refused.is_error and code != "outcome_unknown", "refused, and not as an unknown outcome")
                check(not upstream.starts(), "nothing ran")
                # Back on the same address: the same call runs, once.
                upstream.listen(port)
                upstream.start()
                again = await client.call_tool("append", {"line": "x"}, meta=meta)
                say(f"sent again once the server is back -> error={again.is_error} {reads(again)!r}")
                check(not again.is_error and len(upstream.starts()) == 1, "it runs, once")
            TABLE.append(("HTTP upstream refusing, then back", "runs upstream (non-idempotent)", "-", "1"))
        finally:
            upstream.close()


CASES = {
    "edit_file": edit_file,
    "move_file": move_file,
    "create_entities": create_entities,
    "operator_approval": operator_approval,
    "over_http": over_http,
    "everything": everything,
    "crash_idempotent": lambda: crash("idempotent_write"),
    "crash_non_idempotent": lambda: crash("non_idempotent_write"),
    "upstream_over_http": upstream_over_http,
    "crash_http_idempotent": lambda: crash_http("idempotent_write"),
    "crash_http_non_idempotent": lambda: crash_http("non_idempotent_write"),
    "refused_http": refused_http,
    "restarted_everything": restarted_everything,
    "long_calls": long_calls,
    "principals_over_http": principals_over_http,
    "oauth_over_http": oauth_over_http,
    "two_instances": two_instances,
    "config_checked": config_checked,
    "upstream_error": upstream_error,
    "https_upstream": https_upstream,
    "https_listen": https_listen,
}

# Cases run by a test that starts the server they need.
NEED_A_STORE_SERVER = {"two_instances"}


async def main() -> None:
    # Arguments (or IDEM_PROXY_CASES) name the cases to run, to try one
    # alone; by default every case but those that need a store server,
    # which their own tests run.
    chosen = sys.argv[1:] or os.environ.get("IDEM_PROXY_CASES", "").split()
    for name in chosen or [c for c in CASES if c not in NEED_A_STORE_SERVER]:
        await CASES[name]()
    say("\n## upstream effects, directly and through `idem proxy`\n")
    say("| scenario | counted | directly | through idem proxy |")
    say("|---|---|---|---|")
    for row in TABLE:
        say("| " + " | ".join(row) + " |")
    say("\nall cases passed")


asyncio.run(main())

"""What the `idem proxy` cases driven by the official Python MCP SDK share:
the programs and servers they start, the people and places they act as,
the checks, and the table of upstream effects. Imported by
`proxy_clients.py` (the cases over stdio, and the runner) and
`proxy_http.py` (the cases over streamable HTTP and HTTPS).
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


ENTITY = {"entities": [{"name": "Ada", "entityType": "person", "observations": ["wrote the first program"]}]}


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


def namespaces(here: "Place") -> list[str]:
    """The namespaces of the records in `here`'s store."""
    listed = json.loads(here.idem("--json", "ls"))["records"]
    spaces = sorted({r["namespace"] for r in listed})
    say(f"records by namespace: {spaces}")
    return spaces


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


def on_shared_store(here: Place, name: str) -> tuple[str, Path]:
    """Point `here` at a schema of its own (a store no earlier run wrote
    to) on the PostgreSQL server the test started, and make the principal
    alice there: her token and the principals file."""
    server = os.environ["IDEM_TWO_INSTANCES_STORE"]
    here.store = f"{server}{'&' if '?' in server else '?'}schema={name}_{os.getpid()}_{int(time.time())}"
    made = subprocess.run([IDEM, "principal", "alice"], capture_output=True, text=True, check=True)
    principals = here.dir / "principals.toml"
    principals.write_text(made.stdout)
    return made.stderr.strip().splitlines()[-1], principals


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

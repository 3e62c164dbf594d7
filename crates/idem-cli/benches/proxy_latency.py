"""What `idem proxy` adds to a call: the same calls from the official
Python MCP SDK, straight to npm's reference servers and through the proxy,
in one run, over stdio.

    cargo build --release -p idem-cli
    IDEM_BIN=target/release/idem \
    IDEM_MCP_SERVERS=target/mcp-servers/node_modules/@modelcontextprotocol \
    target/python-mcp/bin/python crates/idem-cli/benches/proxy_latency.py [CALLS]

For each kind of call it prints the median and 95th percentile of CALLS
sequential calls (1,000 by default) directly and through the proxy, and
the difference: `echo` of server-everything (a read: never recorded),
`create_entities` of server-memory with new arguments each time (a first
write: claimed and completed in the store) and the same call again with its
key (a duplicate: answered from the record, the upstream not called). The
proxy records in a SQLite store in a temporary directory. The client's own
cost is in both columns; the difference is the proxy's.
"""

import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from mcp import Client, StdioServerParameters

IDEM = os.environ["IDEM_BIN"]
SERVERS = Path(os.environ["IDEM_MCP_SERVERS"])
NODE = os.environ.get("IDEM_NODE") or shutil.which("node")
CALLS = int(sys.argv[1]) if len(sys.argv) > 1 else 1000


def server(name: str, *args: str) -> list[str]:
    return [NODE, str(SERVERS / name / "dist" / "index.js"), *args]


def client(command: list[str], proxied: bool, place: Path) -> Client:
    env = {"MEMORY_FILE_PATH": str(place / f"memory-{proxied}.jsonl")}
    if proxied:
        env["IDEM_STORE"] = f"sqlite://{place / 'idem.db'}"
        return Client(StdioServerParameters(command=IDEM, args=["proxy", "--", *command], env=env))
    return Client(StdioServerParameters(command=command[0], args=command[1:], env=env))


async def timed(call) -> list[float]:
    """Milliseconds of each of CALLS calls of `call(i)`, after 50 unmeasured."""
    for i in range(50):
        await call(-1 - i)
    spent = []
    for i in range(CALLS):
        started = time.perf_counter()
        await call(i)
        spent.append((time.perf_counter() - started) * 1000)
    return spent


def entity(i: int) -> dict:
    return {"entities": [{"name": f"e{i}", "entityType": "thing", "observations": []}]}


async def measure(proxied: bool, place: Path) -> dict[str, list[float]]:
    out = {}
    async with client(server("server-everything", "stdio"), proxied, place) as c:
        out["read (echo)"] = await timed(lambda i: c.call_tool("echo", {"message": "hello"}))
    async with client(server("server-memory"), proxied, place) as c:
        meta = lambda i: {"io.idem/idempotencyKey": f"latency-{i}"}
        out["first write (create_entities)"] = await timed(
            lambda i: c.call_tool("create_entities", entity(i), meta=meta(i))
        )
        if proxied:
            # The same calls again, with their keys: answered from the record.
            out["duplicate (create_entities)"] = await timed(
                lambda i: c.call_tool("create_entities", entity(i), meta=meta(i))
            )
    return out


def quantiles(ms: list[float]) -> tuple[float, float]:
    ordered = sorted(ms)
    return statistics.median(ordered), ordered[int(len(ordered) * 0.95) - 1]


async def main() -> None:
    place = Path(tempfile.mkdtemp(prefix="idem-proxy-latency-"))
    try:
        direct = await measure(False, place)
        proxied = await measure(True, place)
    finally:
        shutil.rmtree(place, ignore_errors=True)
    print(f"{CALLS} sequential calls each over stdio (ms per call):")
    print("| call | direct median | direct p95 | proxied median | proxied p95 | added median | added p95 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, ms in proxied.items():
        # A duplicate is compared with the direct first write it replaces.
        base = direct.get(name) or direct["first write (create_entities)"]
        (dm, d95), (pm, p95) = quantiles(base), quantiles(ms)
        print(f"| {name} | {dm:.3f} | {d95:.3f} | {pm:.3f} | {p95:.3f} | {pm - dm:+.3f} | {p95 - d95:+.3f} |")


asyncio.run(main())

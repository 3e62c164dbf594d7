"""One `idem proxy` in front of three upstream servers (PyPI's
mcp-server-git, npm's server-memory, and the slow upstream over HTTP),
their tools served under a prefix each, narrowed by include and exclude;
one upstream killed and started again while the others serve. Effects are
counted at their source: git's branches, the memory file, the journal.
Run by `proxy_clients.py`.
"""

from proxy_support import *  # noqa: F401,F403
from proxy_ops import probed  # noqa: E402

GATEWAY_CONFIG = """
[server]
name = "team"

[[upstream]]
name = "git"
command = {git}
include = ["git_status", "git_create_branch", "git_branch"]

[[upstream]]
name = "memory"
command = {memory}
exclude = ["delete_*"]

[[upstream]]
name = "slow"
url = "{slow}"

[tools.git_git_create_branch]
class = "non_idempotent_write"

[tools.slow_append]
class = "idempotent_write"
timeout = "5s"
"""


async def gateway() -> None:
    import httpx2

    say("\n## one `idem proxy` in front of three upstreams: git, memory and a slow one over HTTP")
    with place() as here:
        repo = here.dir / "repo"
        repo.mkdir()
        for command in (["init", "-q", "-b", "main"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "first"]):
            subprocess.run(["git", "-C", str(repo), *command], check=True)
        memory = here.dir / "memory.jsonl"
        slow = SlowUpstream(here)
        slow.start()
        config = here.dir / "gateway.toml"
        config.write_text(GATEWAY_CONFIG.format(
            git=json.dumps([os.environ["IDEM_MCP_SERVER_GIT"], "--repository", str(repo)]),
            memory=json.dumps(npm_server("server-memory")),
            slow=slow.url,
        ))
        env = {**os.environ, "IDEM_STORE": here.store, "MEMORY_FILE_PATH": str(memory)}
        proxy, url = serving([IDEM, "proxy", "--listen", "127.0.0.1:0", "--no-auth", "--config", str(config)], env)
        try:
            async with Client(url) as client:
                names = sorted(t.name for t in (await client.list_tools()).tools)
                say(f"tools served: {', '.join(names)}")
                for expected in ("git_git_status", "git_git_create_branch", "memory_create_entities", "memory_read_graph", "slow_append"):
                    check(expected in names, f"{expected} served: {names}")
                check("git_git_reset" not in names, "outside git's include list")
                check(not any(n.startswith("memory_delete_") for n in names), f"memory's exclude list: {names}")

                branch = {"repo_path": str(repo), "branch_name": "feature-1"}
                meta = {"io.idem/idempotencyKey": "gateway-branch-1"}
                first = await client.call_tool("git_git_create_branch", branch, meta=meta)
                again = await client.call_tool("git_git_create_branch", branch, meta=meta)
                check(not first.is_error and not again.is_error, f"{reads(first)!r} / {reads(again)!r}")
                check(again.meta.get("io.idem/deduplicated") is True, "the retry answered from the record")
                branches = subprocess.run(["git", "-C", str(repo), "branch", "--list", "feature-*"], capture_output=True, text=True, check=True).stdout.split()
                check(branches == ["feature-1"], f"one branch: {branches}")

                meta = {"io.idem/idempotencyKey": "gateway-entity-1"}
                for _ in range(2):
                    await client.call_tool("memory_create_entities", ENTITY, meta=meta)
                entities = [line for line in memory.read_text().splitlines() if '"entity"' in line]
                check(len(entities) == 1, f"one entity in the memory file: {entities}")

                # The slow upstream dies: the others serve on; its own call
                # fails as not sent, and works once it is back.
                slow.kill()
                async with httpx2.AsyncClient(timeout=30) as http:
                    down = await probed(http, url.removesuffix("/mcp"), "/readyz", 503)
                check(list(down["down"]) == ["upstream:slow"], f"/readyz names slow, and only it: {down}")
                graph = await client.call_tool("memory_read_graph", {})
                check(not graph.is_error, f"memory serves while slow is down: {reads(graph)!r}")
                down = await client.call_tool("slow_append", {"line": "while-down"}, meta={"io.idem/idempotencyKey": "gateway-slow-1"})
                say(f"slow_append while its upstream is down -> error={down.is_error}: {reads(down)[:160]!r}")
                slow.start()
                back = await client.call_tool("slow_append", {"line": "after"}, meta={"io.idem/idempotencyKey": "gateway-slow-2"})
                check(not back.is_error, f"slow serves again once started: {reads(back)!r}")
                # An idempotent write: a first attempt slower than its 5 s
                # (a loaded machine) is retried with the same key, which the
                # upstream sees again; never a second key.
                after = [s for s in slow.starts() if " after " in s + " "]
                check(len(after) >= 1 and len({s.split()[-1] for s in after}) == 1, f"one key upstream: {slow.starts()}")
                status = await client.call_tool("git_git_status", {"repo_path": str(repo)})
                check(not status.is_error and "main" in reads(status), f"git still serves: {reads(status)!r}")
                async with httpx2.AsyncClient(timeout=30) as http:
                    ready = await probed(http, url.removesuffix("/mcp"), "/readyz", 200)
                checks = {"store": "ok", "upstream:git": "ok", "upstream:memory": "ok", "upstream:slow": "ok"}
                check(ready["checks"] == checks, f"every upstream ready again: {ready}")
        finally:
            proxy.send_signal(signal.SIGINT)
            proxy.wait(timeout=20)
            slow.close()
    TABLE.append(("gateway: a branch and an entity sent twice, one upstream restarted", "branches, entities", "-", "1, 1"))

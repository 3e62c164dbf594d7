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

from proxy_support import *  # noqa: F401,F403
from proxy_http import (  # noqa: F401
    crash_http,
    https_listen,
    https_upstream,
    oauth_over_http,
    over_http,
    principals_over_http,
    refused_http,
    two_instances,
    upstream_over_http,
)
from proxy_ops import (  # noqa: F401
    access_logged,
    config_reloaded,
    ctrl_c_in_a_terminal,
    drained_on_sigterm,
    grace_runs_out,
    jsonrpc_errors,
    health_and_readiness,
    metrics_scraped,
    principals_reloaded,
    second_signal,
    session_deleted,
    sessions_bounded,
)
from proxy_dead_instance import dead_instance
from proxy_gateway import gateway
from proxy_rules import chat_under_rules
from proxy_soak import soak


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
    "dead_instance": dead_instance,
    "gateway": gateway,
    "soak": soak,
    "config_checked": config_checked,
    "upstream_error": upstream_error,
    "https_upstream": https_upstream,
    "https_listen": https_listen,
    "drained_on_sigterm": drained_on_sigterm,
    "grace_runs_out": grace_runs_out,
    "second_signal": second_signal,
    "session_deleted": session_deleted,
    "access_logged": access_logged,
    "health_and_readiness": health_and_readiness,
    "metrics_scraped": metrics_scraped,
    "principals_reloaded": principals_reloaded,
    "config_reloaded": config_reloaded,
    "sessions_bounded": sessions_bounded,
    "jsonrpc_errors": jsonrpc_errors,
    "ctrl_c_in_a_terminal": ctrl_c_in_a_terminal,
    "chat_under_rules": chat_under_rules,
}


# Cases run by a test of their own: that starts or finds the server they
# need (PostgreSQL, PyPI's mcp-server-git), or that stops the proxy.
OWN_TEST = {"two_instances", "dead_instance", "gateway", "soak", "drained_on_sigterm", "grace_runs_out",
            "second_signal", "session_deleted", "access_logged", "health_and_readiness", "metrics_scraped",
            "principals_reloaded", "config_reloaded", "ctrl_c_in_a_terminal", "chat_under_rules",
            "sessions_bounded", "jsonrpc_errors"}


async def main() -> None:
    # Arguments (or IDEM_PROXY_CASES) name the cases to run, to try one
    # alone; by default every case but those that need a store server,
    # which their own tests run.
    chosen = sys.argv[1:] or os.environ.get("IDEM_PROXY_CASES", "").split()
    for name in chosen or [c for c in CASES if c not in OWN_TEST]:
        await CASES[name]()
    say("\n## upstream effects, directly and through `idem proxy`\n")
    say("| scenario | counted | directly | through idem proxy |")
    say("|---|---|---|---|")
    for row in TABLE:
        say("| " + " | ".join(row) + " |")
    say("\nall cases passed")


asyncio.run(main())

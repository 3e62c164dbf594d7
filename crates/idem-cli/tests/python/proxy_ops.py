"""What an operator runs `idem proxy --listen` by, driven by the official
Python MCP SDK (and, where the proxy is stopped before it answers, by MCP
over HTTP by hand): stopped by SIGTERM while calls are under way, the calls
finish, are answered and recorded; a grace shorter than the calls, or a
second signal, stops it at once, naming each call left. A session ends with
DELETE. Each call writes one access line to the log. The upstream is
`slow_upstream.py` over stdio, holding every call while its hold file
exists; its journal counts the effects. Run by `proxy_clients.py`.
"""

from proxy_support import *  # noqa: F401,F403
from mcp.client.streamable_http import streamable_http_client


class Stoppable:
    """`idem proxy --listen … -- python slow_upstream.py` in `here`, its
    calls held while `hold` exists."""

    def __init__(self, here: Place, *flags: str, auth: tuple[str, ...] = ("--no-auth",), **popen) -> None:
        self.here = here
        self.journal, self.hold = here.dir / "journal", here.dir / "hold"
        config = here.dir / "proxy.toml"
        config.write_text(CRASH_CONFIG.format(cls="non_idempotent_write"))
        env = {
            **os.environ,
            "IDEM_STORE": here.store,
            "SLOW_UPSTREAM_JOURNAL": str(self.journal),
            "SLOW_UPSTREAM_HOLD": str(self.hold),
            "SLOW_UPSTREAM_PID": str(here.dir / "pid"),
        }
        command = [IDEM, "proxy", "--listen", "127.0.0.1:0", *auth, "--config", str(config), *flags,
                   "--", sys.executable, str(HERE / "slow_upstream.py")]
        self.hold.touch()
        self.process, self.url = serving(command, env, **popen)
        self.port = int(re.search(r":(\d+)/mcp", self.url).group(1))

    def said(self, words: str) -> str:
        """The proxy's next line of stderr with `words` in it (log lines
        before it skipped)."""
        for line in self.process.stderr:
            if words in line:
                return line
        raise AssertionError(f"the proxy never said {words!r}")

    def lines(self, prefix: str) -> list[str]:
        if not self.journal.exists():
            return []
        return [line for line in self.journal.read_text().splitlines() if line.startswith(prefix)]

    async def started(self, n: int) -> None:
        """Until `n` calls have started upstream (at most 30 seconds)."""
        for _ in range(600):
            if len(self.lines("start")) >= n:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"{n} calls did not start: {self.lines('')}")

    def ended(self, timeout: float, calls: list | None = None) -> tuple[int, str, float]:
        """Wait for the proxy to exit: its code, the rest of its stderr, and
        how long it took (said); the client's `calls` still waiting are
        given up."""
        began = time.monotonic()
        code = self.process.wait(timeout=timeout)
        stderr, took = self.process.stderr.read(), time.monotonic() - began
        say(f"exit code {code} after {took:.1f}s; stderr: {stderr.strip()[:400]!r}")
        for task in calls or []:
            task.cancel()
        return code, stderr, took


    def close(self) -> None:
        self.hold.unlink(missing_ok=True)
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=20)


def call(n: int, key: str) -> dict:
    return {"jsonrpc": "2.0", "id": 100 + n, "method": "tools/call",
            "params": {"name": "append", "arguments": {"line": f"l{n}"}, "_meta": {"io.idem/idempotencyKey": key}}}


async def by_hand(proxy: Stoppable, keys: list[str]) -> list:
    """`keys`' calls sent by hand on one session, left waiting: their tasks."""
    import httpx2

    http = httpx2.AsyncClient(timeout=60)
    _, session = await rpc(http, proxy.url, INITIALIZE)
    await rpc(http, proxy.url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    return [asyncio.create_task(rpc(http, proxy.url, call(n, key), session)) for n, key in enumerate(keys)]


async def another_call(proxy: Stoppable) -> dict:
    """A call sent by hand on a session of its own: the answer."""
    import httpx2

    async with httpx2.AsyncClient(timeout=30) as http:
        _, session = await rpc(http, proxy.url, INITIALIZE)
        await rpc(http, proxy.url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
        answer, _ = await rpc(http, proxy.url, call(9, "while-stopping"), session)
        return answer


async def drained_on_sigterm() -> None:
    say("\n## `idem proxy --listen`: SIGTERM with three calls under way")
    with place() as here:
        proxy = Stoppable(here)
        try:
            async with Client(proxy.url) as client:
                # As an agent does before it calls: the SDK checks each
                # structured result against the listed tools (and would
                # list them after the answer, when the proxy may be gone).
                await client.list_tools()
                calls = [
                    asyncio.create_task(client.call_tool("append", {"line": f"l{n}"}, meta={"io.idem/idempotencyKey": f"drain-{n}"}))
                    for n in range(3)
                ]
                await proxy.started(3)
                proxy.process.send_signal(signal.SIGTERM)
                said = proxy.said("stopping")
                say(f"on SIGTERM: {said.strip()}")
                check("SIGTERM: stopping" in said and "3 calls under way" in said, said)
                refused = await another_call(proxy)
                say(f"a new call while stopping -> {json.dumps(refused)[:200]}")
                check(refused.get("error", {}).get("data", {}).get("code") == "server_stopping", "a new call is refused")
                await asyncio.sleep(0.5)
                check(proxy.process.poll() is None, "it waits for the calls under way")
                proxy.hold.unlink()
                results = await asyncio.gather(*calls)
            code, stderr, _ = proxy.ended(30)
            say(f"exit code {code}; stderr: {stderr.strip()!r}")
            answered = [reads(r) for r in results]
            say(f"the three calls -> {answered}")
            check(all(not r.is_error for r in results), f"every call answered with its result: {answered}")
            check(code == 0, f"exit code 0 once every call finished: {code}")
            check("every call under way finished" in stderr, stderr)
            check(len(proxy.lines("start")) == 3, f"three effects, the refused call not one: {proxy.lines('')}")
            check(len(proxy.lines("done")) == 3, f"each finished: {proxy.lines('')}")
            records = json.loads(here.idem("--json", "ls"))["records"]
            states = sorted(r["status"] for r in records)
            say(f"records: {states}")
            check(states == ["succeeded"] * 3, f"each call recorded as succeeded: {states}")
        finally:
            proxy.close()
    TABLE.append(("SIGTERM with three calls under way", "runs upstream, finished", "-", "3"))


async def grace_runs_out() -> None:
    say("\n## `idem proxy --listen --shutdown-grace 1s`: SIGTERM, calls longer than the grace")
    with place() as here:
        proxy = Stoppable(here, "--shutdown-grace", "1s")
        try:
            calls = await by_hand(proxy, ["grace-a", "grace-b"])
            await proxy.started(2)
            proxy.process.send_signal(signal.SIGTERM)
            code, stderr, took = proxy.ended(20, calls)
            check(code == 1, f"exit code 1: calls were left: {code}")
            check(took < 5, f"stopped once the grace ran out: {took:.1f}s")
            check("stopped with 2 calls still under way (the 1s grace ran out)" in stderr, stderr)
            check("`append` (key grace-a)" in stderr and "`append` (key grace-b)" in stderr, f"each call named: {stderr}")
        finally:
            proxy.close()


async def second_signal() -> None:
    say("\n## `idem proxy --listen`: a second SIGTERM stops at once")
    with place() as here:
        proxy = Stoppable(here, "--shutdown-grace", "60s")
        try:
            calls = await by_hand(proxy, ["twice-a"])
            await proxy.started(1)
            proxy.process.send_signal(signal.SIGTERM)
            proxy.said("stopping")
            proxy.process.send_signal(signal.SIGTERM)
            code, stderr, took = proxy.ended(20, calls)
            check(took < 3, f"at once: {took:.1f}s")
            check(code == 1 and "(a second SIGTERM)" in stderr and "key twice-a" in stderr, stderr)
        finally:
            proxy.close()


async def session_deleted() -> None:
    say("\n## `idem proxy --listen`: a session ended with DELETE")
    import httpx2

    with place() as here:
        proxy = Stoppable(here)
        proxy.hold.unlink()
        try:
            async with httpx2.AsyncClient(timeout=30) as http:
                _, session = await rpc(http, proxy.url, INITIALIZE)
                check(session is not None, "a session")
                ended = await http.delete(proxy.url, headers={**ACCEPT, "mcp-session-id": session})
                say(f"DELETE -> {ended.status_code}")
                check(ended.status_code in (200, 204), f"200 or 204, as MCP's clients expect: {ended.status_code}")
                after = await http.post(proxy.url, json=call(0, "after-delete"), headers={**ACCEPT, "mcp-session-id": session})
                say(f"a call on the ended session -> {after.status_code}")
                check(after.status_code == 404, f"the session is gone: {after.status_code}")
            check(proxy.lines("start") == [], "nothing ran")
        finally:
            proxy.close()


async def access_logged() -> None:
    say("\n## `idem proxy --listen --log-format json`: one access line per call")
    import httpx2

    with place() as here:
        made = subprocess.run([IDEM, "principal", "alice"], capture_output=True, text=True, check=True)
        token = made.stderr.strip().splitlines()[-1]
        principals = here.dir / "principals.toml"
        principals.write_text(made.stdout)
        proxy = Stoppable(here, "--log-format", "json", auth=("--principals", str(principals)))
        proxy.hold.unlink()
        try:
            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
            async with http, Client(streamable_http_client(proxy.url, http_client=http)) as client:
                meta = {"io.idem/idempotencyKey": "logged-1"}
                first = await client.call_tool("append", {"line": "x"}, meta=meta)
                again = await client.call_tool("append", {"line": "x"}, meta=meta)
            proxy.process.send_signal(signal.SIGTERM)
            code, stderr, _ = proxy.ended(30)
        finally:
            proxy.close()
        lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
        access = [line for line in lines if line.get("target") == "idem::access"]
        say(f"access lines: {json.dumps(access)}")
        check(code == 0, f"stopped cleanly: {code} {stderr[-300:]}")
        check(len(access) == 2, f"one line per call: {access}")
        key = first.meta["io.idem/key"]
        for line, deduplicated in zip(access, [False, True]):
            check(line["principal"] == "alice" and line["tool"] == "append", f"who and what: {line}")
            check(line["key"] == key and line["class"] == "non_idempotent_write", f"the record's key, the class: {line}")
            check(line["outcome"] == "ok" and line["deduplicated"] is deduplicated, f"how it ended: {line}")
            check(isinstance(line["ms"], int) and line["level"] == "INFO", f"how long: {line}")
        check(not again.is_error and len(proxy.lines("start")) == 1, "the repeat answered from the record")
        check(token not in stderr, "the bearer token is never logged")


class Redis:
    """A redis-server on a free loopback port, which it keeps when started
    again: the store the probes find down and back."""

    def __init__(self, dir: Path) -> None:
        self.port, self.dir = free_port(), dir
        self.url = f"redis://127.0.0.1:{self.port}"
        self.server: subprocess.Popen | None = None

    def start(self) -> None:
        command = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                   "--dir", str(self.dir)]
        self.server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise AssertionError("redis-server did not start")

    def stop(self) -> None:
        if self.server is not None:
            self.server.kill()
            self.server.wait(timeout=20)


async def probed(http, base: str, path: str, want: int, seconds: float = 15) -> dict:
    """GET `base+path` until it answers `want` (at most `seconds`): its
    JSON body."""
    began = time.monotonic()
    while True:
        answer = await http.get(base + path)
        if answer.status_code == want or time.monotonic() - began > seconds:
            break
        await asyncio.sleep(0.2)
    say(f"GET {path} -> {answer.status_code} {answer.text}")
    check(answer.status_code == want, f"{path}: {want}, not {answer.status_code} {answer.text}")
    check(answer.headers["content-type"] == "application/json", f"JSON: {answer.headers}")
    check("127.0.0.1" not in answer.text and "redis" not in answer.text, f"no host, no URL: {answer.text}")
    return answer.json()


async def health_and_readiness() -> None:
    say("\n## `/healthz` and `/readyz` of `idem proxy --listen` and `idem serve`, the store and the upstream stopped")
    if shutil.which("redis-server") is None:
        say("redis-server is not installed: skipped")
        return
    import httpx2

    with place() as here, everything_over_http() as upstream:
        redis = Redis(here.dir)
        redis.start()
        made = subprocess.run([IDEM, "approver", "token", "bot"], capture_output=True, text=True, check=True)
        approvers = here.dir / "approvers.toml"
        approvers.write_text(made.stdout)
        env = {**os.environ, "IDEM_STORE": redis.url}
        proxy, url = serving([IDEM, "proxy", "--listen", "127.0.0.1:0", "--no-auth", "--upstream", upstream.url], env)
        serve = [IDEM, "serve", "--listen", "127.0.0.1:0", "--approvers", str(approvers)]
        inbox, inbox_base = serving(serve, env, r"inbox is on (http://[^/ ]+)/")
        base = url.removesuffix("/mcp")
        try:
            async with httpx2.AsyncClient(timeout=30) as http:
                for where in (base, inbox_base):
                    check((await probed(http, where, "/healthz", 200))["status"] == "alive", "alive")
                    check((await probed(http, where, "/readyz", 200))["status"] == "ready", "ready")
                    head = await http.head(where + "/readyz")
                    check(head.status_code == 200 and head.content == b"", f"HEAD: {head.status_code}")
                    post = await http.post(where + "/readyz")
                    check(post.status_code == 405, f"GET and HEAD only: {post.status_code}")
                ready = await probed(http, base, "/readyz", 200)
                check(ready["checks"] == {"store": "ok", "upstream": "ok"}, f"the proxy checks both: {ready}")

                redis.stop()
                for where in (base, inbox_base):
                    down = await probed(http, where, "/readyz", 503)
                    check(list(down["down"]) == ["store"], f"the store, and only it, is down: {down}")
                    await probed(http, where, "/healthz", 200)
                redis.start()
                for where in (base, inbox_base):
                    await probed(http, where, "/readyz", 200)

                upstream.stop()
                down = await probed(http, base, "/readyz", 503)
                check(list(down["down"]) == ["upstream"], f"the upstream, and only it, is down: {down}")
                upstream.start()
                await probed(http, base, "/readyz", 200)

                # Stopping: not ready any more, while it drains.
                inbox.send_signal(signal.SIGTERM)
                proxy.send_signal(signal.SIGTERM)
                check(proxy.wait(timeout=30) == 0 and inbox.wait(timeout=30) == 0, "both stop cleanly")
        finally:
            for process in (proxy, inbox):
                if process.poll() is None:
                    process.kill()
                    process.wait(timeout=20)
            redis.stop()
    TABLE.append(("/readyz with the store, then the upstream, stopped and back", "503 then 200", "-", "yes"))


def parse_prometheus(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Prometheus's text format, read as a scraper reads it: each sample's
    name, labels and value; comments (HELP, TYPE) checked and skipped."""
    samples = []
    sample = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? ([^ ]+)(?: \d+)?$')
    label = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)')
    for line in text.splitlines():
        if not line or line.startswith("#"):
            check(not line or re.match(r"^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* ", line), f"a comment: {line!r}")
            continue
        found = sample.match(line)
        check(found is not None, f"a sample: {line!r}")
        name, labels, value = found.groups()
        parsed = dict(label.findall(labels or ""))
        check(len(parsed) == (labels or "").count('="'), f"every label read: {line!r}")
        samples.append((name, parsed, float(value)))
    return samples


async def metrics_scraped() -> None:
    say("\n## `idem proxy --listen`: `/metrics` scraped after calls")
    import httpx2

    with place() as here:
        proxy = Stoppable(here)
        proxy.hold.unlink()
        try:
            async with Client(proxy.url) as client:
                await client.list_tools()
                for key in ("metric-a", "metric-b", "metric-a"):
                    result = await client.call_tool("append", {"line": key}, meta={"io.idem/idempotencyKey": key})
                    check(not result.is_error, reads(result))
                # A fourth call held upstream while the scrape reads the
                # store's open records.
                proxy.hold.touch()
                held = asyncio.create_task(
                    client.call_tool("append", {"line": "metric-c"}, meta={"io.idem/idempotencyKey": "metric-c"})
                )
                await proxy.started(3)
                async with httpx2.AsyncClient(timeout=30) as http:
                    scraped = await http.get(proxy.url.removesuffix("/mcp") + "/metrics")
                proxy.hold.unlink()
                check(not (await held).is_error, "the held call ends")
            check(scraped.status_code == 200 and scraped.headers["content-type"].startswith("text/plain"), f"{scraped}")
            text = scraped.text
            say(f"the scrape:\n```\n{text.strip()}\n```")
            samples = parse_prometheus(text)
            counts = {
                labels["idem_outcome"]: value
                for name, labels, value in samples
                if name == "gen_ai_execute_tool_duration_seconds_count"
                and labels.get("gen_ai_tool_name") == "append"
                and labels.get("idem_class") == "non_idempotent_write"
            }
            say(f"calls of append by outcome: {counts}")
            check(counts == {"executed": 2.0, "deduplicated": 1.0}, f"the counts equal the calls made: {counts}")
            gauges = {name: value for name, labels, value in samples
                      if name in ("idem_calls_in_flight", "idem_approvals_pending", "idem_unknown_outcomes_open")}
            say(f"the open records' gauges: {gauges}")
            check(gauges == {"idem_calls_in_flight": 1.0, "idem_approvals_pending": 0.0,
                             "idem_unknown_outcomes_open": 0.0}, f"one call in flight, on the store: {gauges}")
            store_ops = {
                labels["idem_store_operation"]: value
                for name, labels, value in samples
                if name == "idem_store_duration_seconds_count" and labels.get("idem_store_result") == "ok"
            }
            say(f"store operations timed: {store_ops}")
            check(store_ops.get("claim") == 4.0 and store_ops.get("complete") == 2.0,
                  f"four claims (one answered from its record, one held) and two completions timed: {store_ops}")
            for secret in ("metric-a", "metric-b", "metric-c", "io.idem", here.store):
                check(secret not in text, f"no key nor argument in a label: {secret}")
            check(len(proxy.lines("start")) == 3, "three effects")
        finally:
            proxy.close()


def made_principals(*names: str) -> tuple[dict[str, str], dict[str, str]]:
    """`idem principal NAME` for each name: their tokens and their entries
    of a principals file."""
    tokens, entries = {}, {}
    for name in names:
        made = subprocess.run([IDEM, "principal", name], capture_output=True, text=True, check=True)
        tokens[name], entries[name] = made.stderr.strip().splitlines()[-1], made.stdout
    return tokens, entries


async def principals_reloaded() -> None:
    say("\n## `idem proxy --listen --principals`: SIGHUP reads the file again")
    import httpx2

    with place() as here:
        tokens, entries = made_principals("alice", "bob")
        principals = here.dir / "principals.toml"
        principals.write_text(entries["alice"])
        proxy = Stoppable(here, auth=("--principals", str(principals)))
        proxy.hold.unlink()

        async def status(name: str) -> int:
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {tokens[name]}"}, timeout=30) as http:
                answer = await http.post(proxy.url, json=INITIALIZE, headers=ACCEPT)
                return answer.status_code

        try:
            before = (await status("alice"), await status("bob"))
            say(f"alice, bob before -> {before}")
            check(before == (200, 401), f"only alice: {before}")
            principals.write_text(entries["alice"] + entries["bob"])
            proxy.process.send_signal(signal.SIGHUP)
            said = proxy.said("SIGHUP: --principals")
            say(f"on SIGHUP: {said.strip()}")
            check("2 principals now" in said, said)
            after = (await status("alice"), await status("bob"))
            check(after == (200, 200), f"bob's token works without a restart: {after}")
            principals.write_text(entries["alice"] + "[[principal]\nbroken")
            proxy.process.send_signal(signal.SIGHUP)
            said = proxy.said("SIGHUP: --principals")
            say(f"a broken file, SIGHUP: {said.strip()}")
            check("not reloaded" in said and "principals loaded before stay" in said, said)
            kept = (await status("alice"), await status("bob"))
            check(kept == (200, 200), f"the set loaded before stays: {kept}")
            check(tokens["bob"] not in said and tokens["alice"] not in said, "no token said")
        finally:
            proxy.close()


async def config_reloaded() -> None:
    say("\n## `idem proxy --listen --config`: SIGHUP reads the tools' timeouts again, and nothing that keys a call")
    with place() as here:
        proxy = Stoppable(here)
        config = here.dir / "proxy.toml"
        started = config.read_text()
        proxy.hold.unlink()

        def reloaded(text: str) -> str:
            config.write_text(text)
            proxy.process.send_signal(signal.SIGHUP)
            return proxy.said("SIGHUP: --config").strip()

        try:
            async with Client(proxy.url) as client:
                first = await client.call_tool("append", {"line": "a"}, meta={"io.idem/idempotencyKey": "reload-a"})
                check(not first.is_error, reads(first))
                said = reloaded(started + 'timeout = "1s"\n')
                say(f"`timeout = \"1s\"` added, SIGHUP: {said}")
                check("reloaded: timeouts and transient errors as the file says" in said, said)
                # A call the upstream holds now ends after a second, not the
                # five minutes of the file loaded at start.
                proxy.hold.touch()
                began = time.monotonic()
                held = await client.call_tool("append", {"line": "b"}, meta={"io.idem/idempotencyKey": "reload-b"})
                waited = time.monotonic() - began
                say(f"a held call -> error={held.is_error} after {waited:.1f} s: {reads(held)[:200]!r}")
                check(held.is_error and waited < 10, f"the new timeout applies: {waited:.1f} s")
                said = reloaded(started.replace("non_idempotent_write", "idempotent_write") + 'timeout = "2m"\n')
                say(f"the class changed, SIGHUP: {said}")
                check("not reloaded, nothing changed" in said and "`append`'s class" in said, said)
                said = reloaded(started + "timeout = \"1s\"\n[tools.append\n")
                say(f"a broken file, SIGHUP: {said}")
                check("not reloaded, nothing changed" in said, said)
                began = time.monotonic()
                again = await client.call_tool("append", {"line": "c"}, meta={"io.idem/idempotencyKey": "reload-c"})
                waited = time.monotonic() - began
                check(again.is_error and waited < 10, f"the timeout loaded before stays: {waited:.1f} s")
                proxy.hold.unlink()
        finally:
            proxy.close()


async def sessions_bounded() -> None:
    say("\n## `idem proxy --listen --principals`: each MCP session is its opener's, and a principal holds at most 64")
    import httpx2

    with place() as here:
        tokens, entries = made_principals("alice", "bob")
        principals = here.dir / "principals.toml"
        principals.write_text(entries["alice"] + entries["bob"])
        proxy = Stoppable(here, auth=("--principals", str(principals)))

        def as_(name: str, session: str | None = None) -> dict:
            headers = {**ACCEPT, "Authorization": f"Bearer {tokens[name]}", "MCP-Protocol-Version": "2025-06-18"}
            if session is not None:
                headers["Mcp-Session-Id"] = session
            return headers

        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        try:
            async with httpx2.AsyncClient(timeout=30) as http:
                async def opened(name: str) -> str:
                    answer = await http.post(proxy.url, json=INITIALIZE, headers=as_(name))
                    check(answer.status_code == 200, f"initialize: {answer.status_code}")
                    session = answer.headers["mcp-session-id"]
                    done = await http.post(proxy.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                                           headers=as_(name, session))
                    check(done.status_code == 202, f"initialized: {done.status_code}")
                    return session

                async def alive(name: str, session: str) -> int:
                    return (await http.post(proxy.url, json=ping, headers=as_(name, session))).status_code

                # A call under way (held upstream) in the first session:
                # busy, so never closed.
                first = await opened("alice")
                call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                        "params": {"name": "append", "arguments": {"line": "held"},
                                   "_meta": {"io.idem/idempotencyKey": "sessions-held"}}}
                held = asyncio.create_task(http.post(proxy.url, json=call, headers=as_("alice", first)))
                await proxy.started(1)
                began = time.monotonic()
                sessions = [await opened("alice") for _ in range(70)]
                say(f"alice, a call under way in one session, opened 70 more in {time.monotonic() - began:.1f} s")
                statuses = [await alive("alice", s) for s in sessions]
                gone, live = statuses.count(404), statuses.count(200)
                say(f"a ping in each: {live} answered, {gone} gone (the oldest first: {statuses[:8]})")
                check(gone == 7 and live == 63 and statuses[:7] == [404] * 7,
                      f"64 kept with the busy one, the 7 idle longest closed: {statuses}")
                check(await alive("alice", first) == 200, "the session with a call under way is kept")
                proxy.hold.unlink()
                answered = await held
                check(answered.status_code == 200 and "appended held" in answered.text, f"its call ends: {answered.text[:300]}")
                bob = await opened("bob")
                check(await alive("bob", bob) == 200, "bob's own session is his")
                theirs = sessions[-1]
                foreign = await http.post(proxy.url, json=ping, headers=as_("bob", theirs))
                used = foreign.status_code
                # Answered before its body is read: the connection is not
                # kept for a next request that could meet it closed.
                check(foreign.headers.get("connection") == "close", f"refused with Connection: close: {foreign.headers}")
                ended = (await http.delete(proxy.url, headers=as_("bob", theirs))).status_code
                say(f"bob with alice's session id: ping -> {used}, DELETE -> {ended}")
                check(used == 404 and ended == 404, f"another's session is unknown to bob: {used} {ended}")
                check(await alive("alice", theirs) == 200, "alice's session goes on")
                mine = (await http.delete(proxy.url, headers=as_("alice", theirs))).status_code
                check(mine in (200, 204) and await alive("alice", theirs) == 404, f"alice ends her own: {mine}")
        finally:
            proxy.close()


async def jsonrpc_errors() -> None:
    say("\n## `idem proxy --listen`: JSON-RPC's own errors for a body that is not JSON and arguments that are not an object")
    import httpx2

    with place() as here:
        proxy = Stoppable(here)
        proxy.hold.unlink()
        headers = {**ACCEPT, "MCP-Protocol-Version": "2025-06-18"}
        try:
            async with httpx2.AsyncClient(timeout=30) as http:
                opened = await http.post(proxy.url, json=INITIALIZE, headers=headers)
                session = {**headers, "Mcp-Session-Id": opened.headers["mcp-session-id"]}
                await http.post(proxy.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
                cut = await http.post(proxy.url, content=b'{"jsonrpc": "2.0", "id": 7, "method": ', headers=session)
                say(f"a body cut short -> {cut.status_code} {cut.text}")
                check(cut.status_code == 400 and cut.json()["error"]["code"] == -32700 and cut.json()["id"] is None,
                      f"-32700: {cut.text}")
                listed = {"jsonrpc": "2.0", "id": 8, "method": "tools/call",
                          "params": {"name": "append", "arguments": ["x"]}}
                wrong = await http.post(proxy.url, json=listed, headers=session)
                say(f"arguments as an array -> {wrong.status_code} {wrong.text}")
                check(wrong.json()["error"]["code"] == -32602 and wrong.json()["id"] == 8, f"-32602: {wrong.text}")
                check(not proxy.lines("start"), "nothing ran")
        finally:
            proxy.close()


async def ctrl_c_in_a_terminal() -> None:
    say("\n## `idem proxy --listen`: Ctrl-C in its terminal (SIGINT to the whole process group), a call under way")
    with place() as here:
        # A session of its own: the test's terminal, with the proxy as its
        # foreground group.
        proxy = Stoppable(here, start_new_session=True)
        try:
            async with Client(proxy.url) as client:
                await client.list_tools()
                meta = {"io.idem/idempotencyKey": "ctrl-c-1"}
                call = asyncio.create_task(client.call_tool("append", {"line": "x"}, meta=meta))
                await proxy.started(1)
                os.killpg(proxy.process.pid, signal.SIGINT)
                proxy.said("SIGINT: stopping")
                await asyncio.sleep(0.5)
                proxy.hold.unlink()
                result = await call
            code, stderr, _ = proxy.ended(30)
            say(f"the call -> error={result.is_error} {reads(result)!r}; exit code {code}")
            check(not result.is_error and reads(result) == "appended x", "the upstream, not signalled, finished it")
            check(code == 0 and len(proxy.lines("done")) == 1, f"finished and recorded: {code} {stderr[-300:]}")
        finally:
            proxy.close()

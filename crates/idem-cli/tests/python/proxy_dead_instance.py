"""`idem proxy --listen` instances killed mid-call: the same key retried
through another instance on the same store is answered as unknown within
one lease — never after the tool's timeout, let alone a day — listed for an
operator, and never run twice. Run by `proxy_clients.py`.
"""

from proxy_support import *  # noqa: F401,F403

# The executor's default lease, which the proxy keeps.
LEASE = 15


async def dead_instance() -> None:
    say("\n## an `idem proxy --listen` instance over HTTPS killed (-9) mid-call, the key retried through another")
    import ssl

    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    with place() as here:
        token, principals = on_shared_store(here, "dead_instance")
        config = here.dir / "proxy.toml"
        # A timeout far longer than the test: the retry must not wait it out.
        config.write_text(CRASH_CONFIG.format(cls="non_idempotent_write") + 'timeout = "10m"\n')
        upstream = SlowUpstream(here)
        upstream.start()
        upstream.hold.touch()
        env = {**os.environ, "IDEM_STORE": here.store}
        # Served over HTTPS, as a team deploys it.
        ca, cert, key, _ = make_certificates(here.dir)
        trusted = ssl.create_default_context(cafile=str(ca))
        command = [IDEM, "proxy", "--listen", "127.0.0.1:0", "--principals", str(principals),
                   "--tls-cert", str(cert), "--tls-key", str(key),
                   "--config", str(config), "--upstream", upstream.url]
        (a, a_url), (b, b_url) = serving(command, env), serving(command, env)
        check(a_url.startswith("https://") and b_url.startswith("https://"), f"served over HTTPS: {a_url} {b_url}")
        meta = {"io.idem/idempotencyKey": "dead-instance-1"}

        async def call(url: str) -> types.CallToolResult:
            http = httpx2.AsyncClient(verify=trusted, headers={"Authorization": f"Bearer {token}"}, timeout=120)
            async with http, Client(streamable_http_client(url, http_client=http)) as client:
                return await client.call_tool("append", {"line": "x"}, meta=meta)

        def code(result: types.CallToolResult) -> str:
            return ((result.meta or {}).get("io.idem/error") or {}).get("code", "-")

        try:
            first = asyncio.create_task(call(a_url))
            deadline = time.monotonic() + 30
            while not upstream.starts():
                check(time.monotonic() < deadline, "the upstream call started through A")
                await asyncio.sleep(0.05)
            a.kill()
            a.wait(timeout=20)
            killed = time.monotonic()
            with contextlib.suppress(BaseException):
                await first
            answers = []
            while True:
                result = await call(b_url)
                answers.append(code(result))
                if code(result) != "in_flight":
                    break
                check(time.monotonic() - killed < LEASE + 30, f"still in flight: {answers}")
                await asyncio.sleep(1)
            waited = time.monotonic() - killed
            say(f"A killed mid-call; retried through B: {' -> '.join(answers)} after {waited:.1f} s: {reads(result)[:300]!r}")
            check(code(result) == "outcome_unknown", f"refused as unknown: {reads(result)!r}")
            check(waited < LEASE + 10, f"answered within one lease and a margin, not after the timeout: {waited:.1f} s")
            listed = here.idem("ls")
            say(f"idem ls -> {listed.strip().splitlines()[-1] if listed.strip() else '(nothing)'}")
            check("unknown" in listed, f"listed for an operator: {listed!r}")
            again = await call(b_url)
            check(code(again) == "outcome_unknown", "every retry refused until an operator settles it")
            upstream.hold.unlink()
            deadline = time.monotonic() + 20
            while "done x" not in upstream.journal.read_text():
                check(time.monotonic() < deadline, "the first upstream call finished")
                await asyncio.sleep(0.05)
            check(len(upstream.starts()) == 1, f"the upstream ran it once: {upstream.starts()}")
        finally:
            for process in (a, b):
                if process.poll() is None:
                    process.send_signal(signal.SIGINT)
                    process.wait(timeout=20)
            upstream.close()
    TABLE.append(("instance killed mid-call, key retried through another", "runs upstream", "-", "1"))

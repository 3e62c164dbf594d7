"""`idem proxy` over streamable HTTP and HTTPS, driven by the official
Python MCP SDK: upstreams and listeners over HTTP, callers kept apart by
token or OAuth, two instances behind a balancer, crashes and refusals over
HTTP, TLS upstreams and TLS listeners. Run by `proxy_clients.py`.
"""

from proxy_support import *  # noqa: F401,F403


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


async def two_instances() -> None:
    say("\n## two `idem proxy --listen` on one PostgreSQL behind a round-robin balancer: one record space")
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    with place() as here:
        token, principals = on_shared_store(here, "two_instances")
        config = here.dir / "proxy.toml"
        config.write_text(CRASH_CONFIG.format(cls="irreversible"))
        upstream = SlowUpstream(here)
        upstream.start()
        env = {**os.environ, "IDEM_STORE": here.store}
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

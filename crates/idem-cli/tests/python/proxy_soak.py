"""A soak of the deployed stack: two `idem proxy --listen` instances on one
PostgreSQL store in front of one upstream (the slow upstream over HTTP,
served four times behind a gateway: as a read, an idempotent write, a
non-idempotent write and an irreversible one, which an operator approves
with `idem approve` meanwhile), callers sending every intent until it is
answered,
through either instance, while the instances are killed (-9) or stopped
(SIGTERM) and started again every few seconds (and the test restarts
PostgreSQL meanwhile). Counted at the source, the upstream's journal:
duplicate effects, results lost, the longest request. Run by
`proxy_clients.py`; IDEM_SOAK_CALLS sets the calls per class.
"""

import random
import threading

from proxy_support import *  # noqa: F401,F403

# The one upstream four times, under the prefixes r_, i_, n_ and x_.
SOAK_CONFIG = '[server]\nname = "soak"\n' + "".join(
    f'\n[[upstream]]\nname = "{prefix}"\nurl = "{{url}}"\n' for prefix in "rinx"
) + """
[tools.r_append]
class = "read"
[tools.i_append]
class = "idempotent_write"
timeout = "10s"
[tools.n_append]
class = "non_idempotent_write"
timeout = "10s"
[tools.x_append]
class = "irreversible"
approval = "operator"
timeout = "10s"
"""

# The executor's default lease, and the tools' timeout above.
LEASE, TIMEOUT = 15, 10
# Callers at once.
WORKERS = 16
# What a caller sends again: nothing ran, it is still running, or it
# waits for the operator.
AGAIN = {"store_unavailable", "in_flight", "superseded", "transport", "approval_pending"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def drain(process: subprocess.Popen) -> None:
    """Read what the process writes to stderr for as long as it runs, so
    that its logs never fill the pipe and stop it."""
    threading.Thread(target=lambda: [None for _ in process.stderr], daemon=True).start()


async def soak() -> None:
    calls = int(os.environ.get("IDEM_SOAK_CALLS", "75"))
    say(f"\n## soak: two proxies on PostgreSQL, {calls} intents per class, instances killed and stopped meanwhile")
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    with place() as here:
        token, principals = on_shared_store(here, "soak")
        upstream = SlowUpstream(here)
        upstream.start()
        config = here.dir / "soak.toml"
        config.write_text(SOAK_CONFIG.format(url=upstream.url))
        secret = here.dir / "state.secret"
        secret.write_bytes(os.urandom(32))
        env = {**os.environ, "IDEM_STORE": here.store}
        ports = [free_port(), free_port()]

        def start(i: int) -> subprocess.Popen:
            """Start instance `i` on its port; again while it cannot start
            (the store restarting just then is refused at start, and said)."""
            command = [IDEM, "proxy", "--listen", f"127.0.0.1:{ports[i]}", "--principals", str(principals),
                       "--config", str(config), "--state-secret-file", str(secret)]
            for _ in range(20):
                process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
                said = []
                for line in process.stderr:
                    if re.search(r"serving \S+ on http://", line):
                        drain(process)
                        return process
                    said.append(line.strip())
                process.wait(timeout=20)
                starts_refused.append(said[-1] if said else "(nothing said)")
                time.sleep(0.5)
            raise AssertionError(f"instance {i} did not start: {starts_refused[-3:]}")

        starts_refused: list[str] = []
        instances = [start(0), start(1)]
        urls = [f"http://127.0.0.1:{p}/mcp" for p in ports]
        answers: dict[str, tuple[str, str]] = {}
        longest = 0.0
        faults = []
        stop = asyncio.Event()

        async def send(tool: str, line: str, key: str) -> str:
            """One request in a session of its own, through either
            instance: its error code, `ok`, or `transport` when the
            instance died under it."""
            nonlocal longest
            url = random.choice(urls)
            started = time.monotonic()
            try:
                http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=LEASE + TIMEOUT + 30)
                async with http, Client(streamable_http_client(url, http_client=http)) as client:
                    result = await client.call_tool(tool, {"line": line}, meta={"io.idem/idempotencyKey": key})
            except Exception:
                return "transport"
            finally:
                longest = max(longest, time.monotonic() - started)
            if not result.is_error:
                return "ok"
            return ((result.meta or {}).get("io.idem/error") or {}).get("code", "tool_error")

        async def intent(tool: str, line: str) -> None:
            """Send the intent until it is answered (nothing ran, or it is
            still running: sent again), through either instance."""
            key = f"soak-{line}"
            deadline = time.monotonic() + 120
            while True:
                code = await send(tool, line, key)
                if code not in AGAIN or time.monotonic() > deadline:
                    answers[line] = (tool, code)
                    return
                await asyncio.sleep(0.2)

        async def worker(jobs: list[tuple[str, str]]) -> None:
            for tool, line in jobs:
                await intent(tool, line)

        approved: set[str] = set()

        async def operator() -> None:
            """Approve the irreversible calls waiting, as an operator would
            (through whichever store is up: a refusal is tried again)."""
            while not stop.is_set():
                await asyncio.sleep(1)
                listed = await asyncio.to_thread(
                    subprocess.run, [IDEM, "ls", "--state", "awaiting_approval", "--json", "--limit", "0"],
                    env=env, capture_output=True, text=True)
                if listed.returncode != 0:
                    continue
                for record in json.loads(listed.stdout)["records"]:
                    done = await asyncio.to_thread(
                        subprocess.run, [IDEM, "approve", record["key"], "--by", "ops"],
                        env=env, capture_output=True, text=True)
                    if done.returncode == 0:
                        approved.add(record["key"])

        async def chaos() -> None:
            n = 0
            while not stop.is_set():
                await asyncio.sleep(3)
                if stop.is_set():
                    return
                i = n % 2
                how = "kill -9" if n % 4 < 2 else "SIGTERM"
                if how == "kill -9":
                    instances[i].kill()
                else:
                    instances[i].send_signal(signal.SIGTERM)
                await asyncio.to_thread(instances[i].wait, 60)
                faults.append(f"{how} {'AB'[i]}")
                instances[i] = await asyncio.to_thread(start, i)
                n += 1

        jobs = [(f"{c}_append", f"{c}{k}") for k in range(calls) for c in "rinx"]
        random.shuffle(jobs)
        started = time.monotonic()
        try:
            chaos_task = asyncio.create_task(chaos())
            operator_task = asyncio.create_task(operator())
            await asyncio.gather(*(worker(jobs[w::WORKERS]) for w in range(WORKERS)))
            stop.set()
            await chaos_task
            await operator_task
        finally:
            for process in instances:
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
                    process.wait(timeout=60)
            upstream.close()
        took = time.monotonic() - started

        journal = upstream.journal.read_text().splitlines()
        starts: dict[str, int] = {}
        done: set[str] = set()
        for entry in journal:
            kind, line = entry.split()[:2]
            if kind == "start":
                starts[line] = starts.get(line, 0) + 1
            else:
                done.add(line)
        codes: dict[str, int] = {}
        for tool, code in answers.values():
            codes[f"{tool[0]}:{code}"] = codes.get(f"{tool[0]}:{code}", 0) + 1
        twice = [line for line, n in starts.items() if line[0] in "nx" and n > 1]
        lost = [line for line, (_, code) in answers.items() if code == "ok" and line[0] != "r" and line not in done]
        unanswered = [line for line, (_, code) in answers.items() if code in AGAIN]
        say(f"{len(jobs)} intents in {took:.0f} s; faults: {len(faults)} ({', '.join(faults)})")
        if starts_refused:
            say(f"instance starts refused meanwhile: {len(starts_refused)}, e.g. {starts_refused[0][:200]!r}")
        say(f"answers by class and code: {dict(sorted(codes.items()))}")
        say(f"irreversible calls approved by the operator: {len(approved)}")
        check(len(approved) >= 1, "the operator approved calls")
        say(f"upstream runs: {sum(starts.values())}; non-idempotent and irreversible writes run twice: {len(twice)}; "
            f"successes without their effect: {len(lost)}; longest request {longest:.1f} s")
        check(not twice, f"a non-idempotent or irreversible write ran twice: {twice[:5]}")
        check(not lost, f"answered ok without the effect: {lost[:5]}")
        check(not unanswered, f"never answered: {unanswered[:5]}")
        check(longest < TIMEOUT + LEASE + 10, f"a request waited {longest:.1f} s")
        check(len(faults) >= 1, "faults were injected")
    TABLE.append(("soak: kills and stops of two instances", "non-idempotent, irreversible runs twice", "-", "0"))

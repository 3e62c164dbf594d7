"""Approval rules in the chat, driven by the official Python MCP SDK: the
rules `idem serve` publishes to the store hold for the approval the proxy
asks of the person in the chat (MCP elicitation) as for `idem approve`.
Under a rule of two approvals that forbids approving one's own call,
alice accepting her own `delete_entities` in the chat decides nothing
(the audit log says why), nor does `idem approve --by alice`; dana and
erin approve it, and it runs once. Run by `proxy_clients.py`.
"""

from proxy_support import *  # noqa: F401,F403
from mcp.client.streamable_http import streamable_http_client

RULES = """
[[rule]]
name = "deletions"
tools = ["delete_*"]
required = 2
forbid_self_approval = true
"""


def log_of(here: Place, key: str) -> list[dict]:
    return json.loads(here.idem("--json", "log", key))["events"]


async def chat_under_rules() -> None:
    say("\n## the chat's approval under the rules idem serve holds: two people, never the asker")
    import httpx2

    with place() as here:
        entries = []
        for name in ("alice", "dana", "erin"):
            made = subprocess.run([IDEM, "approver", "token", name], capture_output=True, text=True, check=True)
            entries.append(made.stdout)
        approvers = here.dir / "approvers.toml"
        approvers.write_text("\n".join(entries) + RULES)
        made = subprocess.run([IDEM, "principal", "alice"], capture_output=True, text=True, check=True)
        token = made.stderr.strip().splitlines()[-1]
        principals = here.dir / "principals.toml"
        principals.write_text(made.stdout)
        env = {**os.environ, "IDEM_STORE": here.store, "MEMORY_FILE_PATH": str(here.dir / "memory.jsonl")}
        command = [IDEM, "proxy", "--listen", "127.0.0.1:0", "--principals", str(principals), "--",
                   *npm_server("server-memory")]
        proxy, url = serving(command, env)
        person = Person()
        forget = {"entityNames": ["Ada"]}
        try:
            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
            async with http, Client(streamable_http_client(url, http_client=http),
                                    elicitation_callback=person) as client:
                await client.call_tool("create_entities", ENTITY)
                # idem serve publishes its rules to the store as it starts
                # (the proxy made the store); they stay in force after it
                # stops.
                inbox, _ = serving([IDEM, "serve", "--listen", "127.0.0.1:0", "--approvers", str(approvers)],
                                   env, r"inbox is on (http://[^/ ]+)/")
                inbox.send_signal(signal.SIGINT)
                inbox.wait(timeout=20)
                waiting = await client.call_tool("delete_entities", forget)
                graph = last(await client.call_tool("read_graph", {}))
            say(f"alice is asked in the chat and accepts -> the model reads:\n  {reads(waiting)}")
            check(len(person.asked) == 1, f"asked once: {person.asked}")
            check(waiting.is_error and len(graph["entities"]) == 1, "her own acceptance ran nothing")
            listed = json.loads(here.idem("--json", "ls", "--state", "awaiting_approval"))["records"]
            check(len(listed) == 1, f"still awaiting approval: {listed}")
            key = listed[0]["key"]
            refusals = [e for e in log_of(here, key) if "refused" in (e.get("reason") or "")]
            check(len(refusals) == 1, f"the refusal is in the audit log: {log_of(here, key)}")
            say(f"the audit log: {refusals[0]['by']}: {refusals[0]['reason']}")
            check("Rule “deletions” forbids approving your own call: alice asked for it" in refusals[0]["reason"],
                  refusals[0]["reason"])

            own = subprocess.run([IDEM, "--store", here.store, "approve", key, "--by", "alice"],
                                 capture_output=True, text=True)
            say(f"idem approve … --by alice -> exit {own.returncode}: {own.stderr.strip()}")
            check(own.returncode == 1 and "forbids approving your own call" in own.stderr, own.stderr)
            said = here.idem("approve", key, "--by", "dana")
            say(f"idem approve … --by dana -> {said.strip()}")
            check("approval 1 of 2 recorded" in said, said)
            said = here.idem("approve", key, "--by", "erin")
            say(f"idem approve … --by erin -> {said.strip()[:60]}…")
            check(said.startswith("approved "), said)

            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
            async with http, Client(streamable_http_client(url, http_client=http),
                                    elicitation_callback=person) as client:
                done = await client.call_tool("delete_entities", forget)
                again = await client.call_tool("delete_entities", forget)
                graph = last(await client.call_tool("read_graph", {}))
            say(f"alice's call sent again -> {reads(done)!r}")
            check(not done.is_error and graph["entities"] == [], "approved by two others: deleted")
            check(again.meta.get("io.idem/deduplicated") is True, "once")
            check(len(person.asked) == 1, "not asked again")
        finally:
            proxy.send_signal(signal.SIGINT)
            proxy.wait(timeout=20)
    TABLE.append(("chat approval of one's own call under a two-person rule", "deletions", "-", "1 (after dana and erin)"))

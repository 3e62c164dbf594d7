"""Many callers of one key at once: one effect, every caller the same
answer."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Dict, List

import idem_agents as idem


def test_100_threads_racing_one_key_make_one_effect(store_url: str) -> None:
    ex = idem.Executor(store_url)
    effects: List[int] = []
    lock = threading.Lock()

    @idem.tool("non_idempotent_write")
    def pay(args: Dict[str, Any]) -> Dict[str, Any]:
        time.sleep(0.05)
        with lock:
            effects.append(args["cents"])
        return {"paid": args["cents"]}

    results: List[idem.CallResult] = []
    barrier = threading.Barrier(100)

    def caller() -> None:
        barrier.wait()
        result = ex.call(pay, {"cents": 250}, call_id="race-1")
        with lock:
            results.append(result)

    threads = [threading.Thread(target=caller) for _ in range(100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(results) == 100
    assert effects == [250]
    assert sum(not r.deduplicated for r in results) == 1
    assert {r.key for r in results} == {results[0].key}
    assert all(r.output == {"paid": 250} for r in results)


def test_100_asyncio_tasks_racing_one_key_make_one_effect(store_url: str) -> None:
    ex = idem.Executor(store_url)
    effects: List[int] = []

    @idem.tool("irreversible")
    async def transfer(args: Dict[str, Any], ctx: idem.Context) -> str:
        await asyncio.sleep(0.05)
        effects.append(1)
        return f"transfer {ctx.key}"

    ex = idem.Executor(store_url, approvals=["transfer"])

    async def main() -> List[idem.CallResult]:
        return await asyncio.gather(
            *[ex.acall(transfer, {"to": "acct-9", "cents": 10}, call_id="race-2") for _ in range(100)]
        )

    results = asyncio.run(main())
    assert effects == [1]
    assert sum(not r.deduplicated for r in results) == 1
    assert len({r.output for r in results}) == 1

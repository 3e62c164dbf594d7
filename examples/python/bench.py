"""Per-call cost from Python: idem against a plain dict wrapper and the
PyPI packages `exactly-once` and `agent-once`, in one run, on one machine.

    python examples/python/bench.py [N]     # N calls per case, 10,000 by default

Each case makes N first calls (a new call id each) and then the same N
calls again (duplicates, answered from the record), timing every call on
its own; it prints the median of each. On SQLite every store runs with
`synchronous=FULL` (idem's default; the peers are switched to it), in a
temporary directory. The tool does nothing, so what is measured is the
wrapper.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Dict, List, Tuple

import idem_agents as idem


def effect(n: int) -> Dict[str, int]:
    return {"n": n}


def measure(call: Callable[[int], Any], n: int) -> Tuple[float, float]:
    """Median microseconds of `n` first calls, then of their duplicates."""
    out: List[float] = []
    for phase in range(2):
        times = []
        for i in range(n):
            start = time.perf_counter_ns()
            call(i)
            times.append(time.perf_counter_ns() - start)
        out.append(statistics.median(times) / 1000)
        del phase
    return out[0], out[1]


def dict_wrapper() -> Callable[[int], Any]:
    """The wrapper everyone writes first: a dict under a lock."""
    done: Dict[str, Any] = {}
    lock = threading.Lock()

    def call(i: int) -> Any:
        key = f"call_{i}"
        with lock:
            if key in done:
                return done[key]
        out = effect(i)
        with lock:
            done[key] = out
        return out

    return call


def idem_case(store: str, cls: str) -> Callable[[int], Any]:
    executor = idem.Executor(store)

    @idem.tool(cls, name="effect")
    def tool(args: Dict[str, Any]) -> Dict[str, int]:
        return effect(args["n"])

    return lambda i: executor.call(tool, {"n": i}, call_id=f"call_{i}").output


def exactly_once_case(sqlite_path: str) -> Callable[[int], Any]:
    import exactly_once

    store = exactly_once.Store.sqlite(sqlite_path) if sqlite_path else exactly_once.Store.memory()
    conn = getattr(store, "_conn", None)
    if conn is not None:
        conn.execute("PRAGMA synchronous=FULL;")

    guarded: Callable[[int], Any] = exactly_once.once(store, key=lambda n: f"call_{n}")(effect)
    return guarded


def agent_once_case(sqlite_path: str) -> Callable[[int], Any]:
    import once

    runner = once.Once(sqlite_path)
    # Its default already (WAL, no `synchronous` set), made explicit on the
    # connection of this thread, the one the bench calls from.
    getattr(runner.store, "_conn")().execute("PRAGMA synchronous=FULL")
    return lambda i: runner.execute(effect, key=f"call_{i}", tool_name="effect", n=i)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    tmp = tempfile.mkdtemp(prefix="idem-bench-")
    cases: List[Tuple[str, Callable[[], Callable[[int], Any]]]] = [
        ("dict wrapper (memory)", dict_wrapper),
        ("idem memory, idempotent_write", lambda: idem_case("memory:", "idempotent_write")),
        ("idem memory, non_idempotent_write", lambda: idem_case("memory:", "non_idempotent_write")),
        ("exactly-once memory", lambda: exactly_once_case("")),
        ("idem SQLite FULL, idempotent_write", lambda: idem_case(f"sqlite://{tmp}/idem-i.db", "idempotent_write")),
        ("idem SQLite FULL, non_idempotent_write", lambda: idem_case(f"sqlite://{tmp}/idem-n.db", "non_idempotent_write")),
        ("exactly-once SQLite FULL", lambda: exactly_once_case(f"{tmp}/exactly-once.db")),
        ("agent-once SQLite FULL", lambda: agent_once_case(f"{tmp}/agent-once.db")),
    ]
    print(f"median per call, {n} calls each, microseconds")
    print(f"{'case':42} {'first call':>12} {'duplicate':>12}")
    for name, make in cases:
        try:
            call = make()
        except ImportError as e:
            print(f"{name:42} {'not installed: ' + str(e.name):>25}")
            continue
        first, dup = measure(call, n)
        print(f"{name:42} {first:12.1f} {dup:12.1f}")


if __name__ == "__main__":
    main()

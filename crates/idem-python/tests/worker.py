"""A worker process of test_takeover.py: calls one tool on a store and
hangs inside it, to be SIGKILLed mid-call.

    python worker.py STORE_URL CLASS CALL_ID MARKER_FILE
"""

from __future__ import annotations

import pathlib
import sys
import time
from typing import Any, Dict

import idem_agents as idem

store, cls, call_id, marker = sys.argv[1:5]


@idem.tool(cls, name="book_room", timeout="3s")
def book_room(args: Dict[str, Any], ctx: idem.Context) -> str:
    # The effect's first half is done; the process dies before it returns.
    pathlib.Path(marker).write_text(ctx.key or "")
    time.sleep(3600)
    return "unreachable"


executor = idem.Executor(store, lease="1s", approvals=["book_room"])
executor.call(book_room, {"room": 12}, call_id=call_id)

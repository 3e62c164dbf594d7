"""send_email, as a Python user writes it: the model's call id is the key,
the key is the email's Message-ID, and a repeat is answered from the
record instead of sending a second email.

    pip install idem-agents
    python examples/python/send_email.py            # sqlite://idem.db beside you
    IDEM_STORE=memory: python examples/python/send_email.py
"""

from __future__ import annotations

import os
from typing import Any, Dict, List

from idem_agents import Context, Executor, ToolError, tool

OUTBOX: List[Dict[str, str]] = []


@tool("idempotent_write", timeout="30s", max_attempts=3)
def send_email(args: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """Send an email to a customer."""
    if "@" not in args["to"]:
        # A definite failure: recorded, and told to every repeat.
        raise ToolError.permanent(f"{args['to']!r} is not an email address")
    # The key goes downstream: a mail provider that deduplicates on
    # Message-ID makes even a retry after a timeout one email.
    message_id = f"<{ctx.key}@example.com>"
    OUTBOX.append({"to": args["to"], "subject": args["subject"], "message_id": message_id})
    return {"message_id": message_id}


def main() -> None:
    executor = Executor(os.environ.get("IDEM_STORE", "sqlite://idem.db"))
    args = {"to": "ada@example.com", "subject": "Your refund", "body": "It is on its way."}
    # The model calls the tool, the run is retried, the model calls it again
    # "to be sure": the same call id each time.
    for attempt in range(3):
        result = executor.call(send_email, args, call_id="call_9f8e7d6c5b4a")
        print(f"call {attempt + 1}: deduplicated={result.deduplicated} output={result.output}")
    print(f"emails sent by this process: {len(OUTBOX)}")


if __name__ == "__main__":
    main()

"""create_ticket with a natural key: the same customer, the same subject
(however it is capitalised or spaced) on the same day is one ticket, even
when the model words the body differently or the call has no call id.

    python examples/python/create_ticket.py
"""

from __future__ import annotations

import os
from typing import Dict, List

from pydantic import BaseModel

from idem_agents import Executor, natural, tool


class NewTicket(BaseModel):
    customer: str
    subject: str
    body: str


class Ticket(BaseModel):
    ticket_id: str
    customer: str


TICKETS: List[NewTicket] = []


def normalise_subject(subject: str) -> str:
    """`Refund  Please!` and `refund please` are one subject."""
    return " ".join(subject.lower().strip(" .!?").split())


@tool(
    "non_idempotent_write",
    key=natural("customer", subject=normalise_subject, window="1d"),
)
def create_ticket(args: NewTicket) -> Ticket:
    """Open a support ticket for a customer."""
    TICKETS.append(args)
    return Ticket(ticket_id=f"T-{len(TICKETS)}", customer=args.customer)


def main() -> None:
    executor = Executor(os.environ.get("IDEM_STORE", "sqlite://idem.db"))
    asks: List[Dict[str, str]] = [
        {"customer": "cus_17", "subject": "Refund please", "body": "Order 1 arrived broken."},
        {"customer": "cus_17", "subject": "refund  PLEASE!", "body": "Broken on arrival, order 1."},
        {"customer": "cus_42", "subject": "Refund please", "body": "Wrong size."},
    ]
    for ask in asks:
        result = executor.call(create_ticket, ask)
        print(f"{ask['customer']} {ask['subject']!r}: {result.output} deduplicated={result.deduplicated}")
    print(f"tickets opened by this process: {len(TICKETS)}")


if __name__ == "__main__":
    main()

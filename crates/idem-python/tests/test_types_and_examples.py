"""The package's types hold (mypy --strict over the package, its stubs
and the examples), and the examples run as their docstrings say."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
from pydantic import BaseModel

import idem_agents as idem
from conftest import WORKSPACE

PACKAGE = WORKSPACE / "crates" / "idem-python" / "python" / "idem_agents"
EXAMPLES = WORKSPACE / "examples" / "python"


def test_mypy_strict_accepts_the_package_and_the_examples() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--config-file", str(PACKAGE.parents[1] / "pyproject.toml"), str(PACKAGE), str(EXAMPLES)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize(
    "example, says",
    [
        ("send_email.py", "emails sent by this process: 1"),
        ("create_ticket.py", "tickets opened by this process: 2"),
    ],
)
def test_the_examples_run(example: str, says: str) -> None:
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / example)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "IDEM_STORE": "memory:"},
    )
    assert out.returncode == 0, out.stderr
    assert says in out.stdout
    assert "deduplicated=True" in out.stdout


class Order(BaseModel):
    order_id: str


def test_a_natural_key_naming_no_field_of_the_model_is_refused() -> None:
    def cancel(args: Order) -> Any:
        return None

    with pytest.raises(ValueError, match="no argument field `order`"):
        idem.tool("non_idempotent_write", key=idem.natural("order"))(cancel)

"""Fixtures of the Python package's tests: stores to run on, the `idem`
program, and the workspace's files.

The servers are the ones the Rust driver (tests/pytest.rs) starts with the
test kit and names in IDEM_TEST_REDIS_URL and IDEM_TEST_POSTGRES_URL; a
store whose URL is not given is skipped, loudly, and under
IDEM_REQUIRE_SERVERS=1 is a failure.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import uuid
from typing import Iterator, Optional

import pytest

WORKSPACE = pathlib.Path(__file__).resolve().parents[3]
REQUIRED = os.environ.get("IDEM_REQUIRE_SERVERS") == "1"


def unavailable(what: str) -> None:
    """Skip loudly, or fail when the servers are required."""
    if REQUIRED:
        pytest.fail(f"IDEM_REQUIRE_SERVERS=1 but {what} is not available")
    pytest.skip(f"SKIPPED: {what} is not available (set IDEM_REQUIRE_SERVERS=1 to make this a failure)")


def _redis_url() -> Optional[str]:
    url = os.environ.get("IDEM_TEST_REDIS_URL")
    # A prefix of its own per test: one server, no interference.
    return f"{url}?prefix=py-{uuid.uuid4().hex[:12]}" if url else None


def _postgres_url() -> Optional[str]:
    url = os.environ.get("IDEM_TEST_POSTGRES_URL")
    if not url:
        return None
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}schema=py_{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=["memory", "sqlite", "redis", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> str:
    """Each store in turn: memory, SQLite (a file of this test), Redis and
    PostgreSQL (the Rust driver's servers)."""
    kind = request.param
    if kind == "memory":
        return "memory:"
    if kind == "sqlite":
        return f"sqlite://{tmp_path}/idem.db"
    url = _redis_url() if kind == "redis" else _postgres_url()
    if url is None:
        unavailable(f"the {kind} server (IDEM_TEST_{kind.upper()}_URL)")
    assert url is not None
    return url


@pytest.fixture
def postgres_url() -> Optional[str]:
    """A PostgreSQL URL of a schema of this test, or None."""
    return _postgres_url()


@pytest.fixture
def idem_bin() -> Iterator[str]:
    """The `idem` program built from the workspace (IDEM_BIN)."""
    path = os.environ.get("IDEM_BIN") or shutil.which("idem")
    if not path or not os.path.exists(path):
        unavailable("the `idem` program (IDEM_BIN)")
    assert path is not None
    yield path

"""The stores over TLS from Python: `rediss://` and PostgreSQL with
`sslmode=verify-full`, against servers the Rust driver (tests/pytest.rs)
starts with certificates it makes. A call is recorded and deduplicated
over TLS; a server whose certificate the named CA did not sign is refused
with a typed error before anything runs."""

from __future__ import annotations

import os
import uuid
from typing import Any, Dict, List

import pytest

import idem_agents as idem
from idem_agents import errors

from conftest import unavailable


@pytest.fixture(params=["rediss", "postgres-tls"])
def tls_store(request: pytest.FixtureRequest) -> Dict[str, str]:
    """A TLS store's URL trusting the test's CA (`url`), and the CA file
    it names (`ca`)."""
    name = "IDEM_TEST_REDISS_URL" if request.param == "rediss" else "IDEM_TEST_POSTGRES_TLS_URL"
    url = os.environ.get(name)
    if not url:
        unavailable(f"the {request.param} server ({name})")
    assert url is not None
    ca = url.split("ca=" if request.param == "rediss" else "sslrootcert=")[1].split("&")[0]
    scope = "prefix=py-" if request.param == "rediss" else "schema=py_"
    return {"url": f"{url}&{scope}{uuid.uuid4().hex[:12]}", "ca": ca}


def test_a_call_is_recorded_and_deduplicated_over_tls(tls_store: Dict[str, str]) -> None:
    runs: List[Any] = []

    @idem.tool("non_idempotent_write", name="charge")
    def charge(args: Dict[str, Any]) -> Dict[str, Any]:
        runs.append(args)
        return {"charged": args["cents"]}

    first = idem.Executor(tls_store["url"]).call(charge, {"cents": 500}, call_id="tls-1")
    # Another executor: its own TLS connections, the same records.
    again = idem.Executor(tls_store["url"]).call(charge, {"cents": 500}, call_id="tls-1")
    assert not first.deduplicated and again.deduplicated
    assert again.output == {"charged": 500} and again.key == first.key
    assert runs == [{"cents": 500}]


def test_a_server_the_named_ca_did_not_sign_is_refused(tls_store: Dict[str, str]) -> None:
    other = os.environ["IDEM_TEST_OTHER_CA"]
    url = tls_store["url"].replace(tls_store["ca"], other)
    with pytest.raises(errors.StoreUnavailable) as raised:
        idem.Executor(url)
    assert raised.value.code == "store_unavailable"
    assert "certificate" in raised.value.message, raised.value.message

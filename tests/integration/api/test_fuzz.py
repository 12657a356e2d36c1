"""Schemathesis against the service's own OpenAPI schema (ASGI, in-process, real demo pipeline): no 5xx.

Positive and negative cases, a bounded number of examples per operation so the run stays
within a minute or so on 2 cores. Raise FEDQA_FUZZ_EXAMPLES for a longer hunt.

The schema is loaded at import from an app whose state gets the shared demo pipeline once the
fixture exists (``schemathesis.pytest.from_fixture`` does not run under pytest 9).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from service.api.app import create_app
from service.api.state import ServiceState
from tests.conftest import make_settings

EXAMPLES = int(os.environ.get("FEDQA_FUZZ_EXAMPLES", "40"))


class _SharedPipelineState(ServiceState):
    """Holds the session's shared pipeline: the app's lifespan neither loads nor closes it."""

    def load(self) -> None:
        pass

    def close(self) -> None:
        pass


# Keys off and no rate limit, so every case reaches the pipeline (auth and 429 are in test_security).
_STATE = _SharedPipelineState(make_settings(Path(tempfile.gettempdir()) / "fedqa-fuzz-unused", rate_limit_per_minute=0))
schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(_STATE.settings, _STATE))


@pytest.fixture(autouse=True, scope="module")
def _wire_pipeline(demo_pipeline):
    _STATE.pipeline = demo_pipeline
    yield
    _STATE.pipeline = None


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_no_server_error(case):
    case.call_and_validate(checks=[not_a_server_error])

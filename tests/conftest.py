"""Suite-wide settings.

Hypothesis: no per-example deadline and no too-slow health check. On a shared 2-core
machine a GC pause or a neighbour can push one example past 200 ms, and that would
be a flaky failure that says nothing about the code.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("trionsq", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("trionsq")

pytest_plugins = ["pytester"]  # tests/e2e/test_testing_plugin.py runs pytest in pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under ``pytest -n 2 --dist loadgroup`` (make test): one worker per test file, and
    every PySpark test on the same worker, so module fixtures start once and only one
    SparkSession (a JVM and its Python workers) runs at a time."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            path = item.nodeid.split("::", 1)[0]
            group = "spark" if path.startswith("tests/spark/") else path
            item.add_marker(pytest.mark.xdist_group(group))

"""Suite-wide settings.

Hypothesis: no per-example deadline and no too-slow health check. On a shared 2-core
machine a GC pause or a neighbour can push one example past 200 ms, and that would
be a flaky failure that says nothing about the code.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

settings.register_profile("trionsq", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("trionsq")

pytest_plugins = ["pytester"]  # tests/e2e/test_testing_plugin.py runs pytest in pytest

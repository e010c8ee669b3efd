"""trionsq's pytest plugin as a user's suite meets it: installed through the
``testing`` extra, and saying what is missing when it is not."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

USER_SUITE = """
from trionsq.protocol import Pub


async def test_publish(nsqd_client):
    await nsqd_client.send(Pub("t", b"hello"))
    [reply] = await nsqd_client.read(1)
    assert reply.data == b"OK"
"""


def test_the_testing_extra_brings_pytest_and_pytest_trio() -> None:
    requirements = importlib.metadata.requires("trionsq") or []
    testing = {
        re.split(r"[<>=;\s\[]", requirement, maxsplit=1)[0]
        for requirement in requirements
        if re.search(r"""extra\s*==\s*["']testing["']""", requirement)
    }
    assert testing == {"pytest", "pytest-trio"}


def test_a_user_suite_gets_a_broker_from_the_plugin(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ntrio_mode = true\n")
    pytester.makepyfile(USER_SUITE)
    pytester.runpytest_subprocess().assert_outcomes(passed=1)


def test_without_pytest_trio_the_trio_fixtures_say_what_to_install(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(USER_SUITE)
    result = pytester.runpytest_subprocess("-p", "no:trio")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*Trio fixtures (nsqd, nsqd_client) need pytest-trio: pip install 'trionsq[[]testing[]]'*"]
    )
    result.stdout.no_fnmatch_line("*fixture 'nursery' not found*")


def test_importing_the_plugin_without_pytest_names_the_extra() -> None:
    hide_pytest = (
        "import sys\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'pytest' or name.startswith(('_pytest', 'pytest.')):\n"
        "            raise ImportError(f'No module named {name!r}')\n"
        "sys.meta_path.insert(0, Hide())\n"
        "import trionsq.testing\n"
    )
    result = subprocess.run(  # noqa: S603 - this interpreter, a fixed script
        [sys.executable, "-c", hide_pytest], capture_output=True, text=True, check=False
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "ImportError: trionsq.testing is a pytest plugin and needs pytest and pytest-trio:"
        " pip install 'trionsq[testing]'"
    )


BAD_CONFIG_SUITE = """
import pytest
from trionsq import NsqdConfig


@pytest.fixture
def nsqd_config():
    return NsqdConfig.loopback(tls_cert="cert.pem")


async def test_publish(nsqd):
    pass
"""


def test_a_bad_nsqd_config_fails_the_test_with_the_config_error_itself(
    pytester: pytest.Pytester,
) -> None:
    """Not inside an ExceptionGroup from pytest-trio's nursery (issue 34): the fixtures
    check the configuration before the test's Trio run starts the broker."""
    pytester.makeini("[pytest]\ntrio_mode = true\n")
    pytester.makepyfile(BAD_CONFIG_SUITE)
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["E *ConfigError: --tls-cert and --tls-key must be given together"])
    result.stdout.no_fnmatch_line("*Exception Group Traceback*")
    result.stdout.no_fnmatch_line("*ExceptionGroup: Exceptions from Trio nursery*")

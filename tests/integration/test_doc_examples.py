"""Every example of docs/client.md, docs/extensions.md and docs/admin.md runs as is
(issue 31, item 7): each block is written to a file and run (``python``, or ``bash``
with ``-euo pipefail``) against a broker this test starts, and a lookupd, TLS or an
auth server where its marker asks (tests/doc_examples.py). nsqd's ports in the code
are replaced by the ones the test's listeners got, so examples keep the addresses a
reader uses. docs/spark.md's examples run in tests/spark/test_doc_examples_spark.py.
"""

from __future__ import annotations

import os
import re
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pytest
import trio
import trustme

from trionsq import NsqdConfig, serve_nsqd
from trionsq.testing import open_nsq_cluster

from ..auth_server import grant, start_auth_server
from ..doc_examples import DOCS, NEEDS, Example, all_examples, with_addresses
from .test_client_blocking import free_port

if TYPE_CHECKING:
    from trionsq.config import NsqdOptions

BIN: Final = Path(sys.executable).parent
EXAMPLES: Final = all_examples()
HERE: Final = [e for e in EXAMPLES if not e.needs & {"spark", "not run"}]
TIMEOUT: Final = 60.0


def address(pair: tuple[str, int] | None) -> str:
    assert pair is not None
    return f"{pair[0]}:{pair[1]}"


async def environment(
    example: Example, stack: AsyncExitStack, nursery: trio.Nursery, directory: Path
) -> dict[str, str]:
    """Start what ``example`` needs; the text to put in place of each default."""
    places = {".venv/bin/": f"{BIN}/"}
    needs = example.needs
    if needs & {"pytest", "own broker"}:
        places |= {"127.0.0.1:4150": f"127.0.0.1:{free_port()}"}
        places |= {"127.0.0.1:4151": f"127.0.0.1:{free_port()}"}
        return places
    changes: NsqdOptions = {}
    if "tls" in needs:
        ca = trustme.CA()
        server = ca.issue_cert("localhost", "127.0.0.1")
        server.cert_chain_pems[0].write_to_path(str(directory / "cert.pem"))
        server.private_key_pem.write_to_path(str(directory / "key.pem"))
        ca.cert_pem.write_to_path(str(directory / "ca.pem"))
        changes["tls_cert"] = str(directory / "cert.pem")
        changes["tls_key"] = str(directory / "key.pem")
    if "auth" in needs:
        auth = await start_auth_server(nursery, {"the-secret": grant()})
        changes["auth_http_addresses"] = (auth.address,)
    if "lookupd" in needs:
        cluster = await stack.enter_async_context(
            open_nsq_cluster(1, 1, nsqd_config=NsqdConfig.loopback(**changes))
        )
        (broker,) = cluster.brokers
        (lookupd,) = cluster.lookupds
        places |= {"127.0.0.1:4160": address(lookupd.tcp), "127.0.0.1:4161": address(lookupd.http)}
    else:
        broker = await nursery.start(serve_nsqd, NsqdConfig.loopback(**changes))
    return places | {"127.0.0.1:4150": address(broker.tcp), "127.0.0.1:4151": address(broker.http)}


def command(example: Example, script: Path) -> list[str]:
    if "pytest" in example.needs:
        return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", script.name]
    if example.language == "python":
        return [sys.executable, script.name]
    return ["bash", "-euo", "pipefail", script.name]


@pytest.mark.parametrize("example", HERE, ids=[example.name for example in HERE])
async def test_the_example_runs_as_is(
    example: Example, nursery: trio.Nursery, tmp_path: Path
) -> None:
    async with AsyncExitStack() as stack:
        places = await environment(example, stack, nursery, tmp_path)
        code = with_addresses(example.code, places)
        # a default port left over (a port the kernel gave, like 41501, is not one)
        defaults = (":4150", ":4151", ":4160", ":4161")
        left = [port for port in defaults if re.search(re.escape(port) + r"(?!\d)", code)]
        assert not left, f"{example.name}: write nsqd's addresses as 127.0.0.1{left[0]}"
        suffix = ".sh" if example.language != "python" else ".py"
        script = tmp_path / (
            f"test_example{suffix}" if "pytest" in example.needs else f"example{suffix}"
        )
        script.write_text(code)
        environ = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
        with trio.fail_after(TIMEOUT):
            done = await trio.run_process(
                command(example, script),
                cwd=tmp_path,
                env=environ,
                check=False,
                capture_stdout=True,
                capture_stderr=True,
            )
    output = (done.stdout + done.stderr).decode(errors="replace")
    sys.stdout.write(output)  # shown with -s: what a reader would see
    assert done.returncode == 0, f"{example.name} exited {done.returncode}:\n{output}"


def test_every_doc_has_examples_and_each_block_says_what_it_needs() -> None:
    """Reading the docs raised nothing (every marker is known); each doc has
    examples; a block not run says why."""
    for doc in DOCS:
        assert any(example.doc == doc for example in EXAMPLES), doc
    for example in EXAMPLES:
        assert example.needs <= NEEDS.keys()
        if "not run" in example.needs:
            assert example.why_not, example.name


def test_addresses_are_replaced_in_one_pass() -> None:
    """A port the kernel hands out may begin like another default (41501 holds 4150):
    replacing one default after another turned 4151 -> 41501 into 419911."""
    places = {"127.0.0.1:4151": "127.0.0.1:41501", "127.0.0.1:4150": "127.0.0.1:41991"}
    code = "http://127.0.0.1:4151/pub tcp 127.0.0.1:4150 other 127.0.0.1:41500"
    assert with_addresses(code, places) == (
        "http://127.0.0.1:41501/pub tcp 127.0.0.1:41991 other 127.0.0.1:41500"
    )

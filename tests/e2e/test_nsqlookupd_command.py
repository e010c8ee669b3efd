"""The ``nsqlookupd`` console script as a subprocess: nsqlookupd's flags, its
``listening on`` lines, a working HTTP API, a clean stop on SIGTERM/SIGINT."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trio

from trionsq import __version__
from trionsq.version import NSQD_RELEASE

NSQLOOKUPD = Path(sys.executable).parent / "nsqlookupd"
LISTENING = re.compile(
    rb"^\[nsqlookupd\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} INFO: "
    rb"(?P<proto>TCP|HTTP): listening on (?P<host>[^\s:]+):(?P<port>\d+)$",
    re.MULTILINE,
)


async def wait_listening(process: trio.Process) -> tuple[bytes, dict[str, tuple[str, int]]]:
    """Read stderr until both ``TCP:``/``HTTP: listening on`` lines appeared."""
    assert process.stderr is not None
    stderr = b""
    found: dict[str, tuple[str, int]] = {}
    with trio.fail_after(20):
        while len(found) < 2:
            chunk = await process.stderr.receive_some(4096)
            assert chunk, f"nsqlookupd exited early: {stderr!r}"
            stderr += chunk
            found = {
                m["proto"].decode(): (m["host"].decode(), int(m["port"]))
                for m in LISTENING.finditer(stderr)
            }
    return stderr, found


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_nsqlookupd_logs_where_it_listens_answers_ping_and_info_and_stops_on_signal(
    signum: signal.Signals,
) -> None:
    process = await trio.lowlevel.open_process(
        [str(NSQLOOKUPD), "-tcp-address=127.0.0.1:0", "--http-address", "127.0.0.1:0"],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        stderr, found = await wait_listening(process)
        assert re.search(rb"INFO: nsqlookupd v1\.3\.0 \(built w/trionsq-", stderr)
        host, port = found["HTTP"]
        assert found["TCP"][0] == "127.0.0.1"
        assert found["TCP"][1] != port
        async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as http:
            ping = await http.get("/ping")
            assert (ping.status_code, ping.content) == (200, b"OK")
            info = await http.get("/info")
            assert info.status_code == 200
            assert info.json() == {"version": NSQD_RELEASE, "trionsq_version": __version__}
        process.send_signal(signum)
        with trio.fail_after(10):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        if process.stderr is not None:
            await process.stderr.aclose()

"""A shell script written for Go nsqd starts trionsq's ``nsqd`` unchanged: nsqd's flags,
TLS files and a data path, then the three ``listening on`` lines it scrapes."""

from __future__ import annotations

import contextlib
import os
import signal
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import trio
import trustme

from trionsq.protocol import MAGIC_V2, Pub
from trionsq.protocol.client import ClientConnection, Response, encode_commands

NSQD = Path(sys.executable).with_name("nsqd")
SCRIPT = Path(__file__).parent / "scripts" / "nsqd_listening.sh"


async def test_a_script_for_go_nsqd_gets_three_listeners(tmp_path: Path) -> None:
    authority = trustme.CA()
    certificate = authority.issue_cert("127.0.0.1")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    certificate.cert_chain_pems[0].write_to_path(cert)
    certificate.private_key_pem.write_to_path(key)
    with trio.fail_after(30):
        result = await trio.run_process(
            ["sh", str(SCRIPT), str(NSQD), str(cert), str(key), str(tmp_path)],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    lines = dict(line.split() for line in result.stdout.decode().splitlines())
    pid = int(lines.pop("PID"))
    try:
        ports = {kind: int(port) for kind, port in lines.items()}
        assert sorted(ports) == ["HTTP", "HTTPS", "TCP"]
        stream = await trio.open_tcp_stream("127.0.0.1", ports["TCP"])
        async with stream:
            await stream.send_all(MAGIC_V2 + encode_commands([Pub("scripted", b"hi")]))
            frames = ClientConnection().receive_data(await stream.receive_some(4096))
            assert isinstance(frames[0], Response)
            assert frames[0].is_ok
        async with httpx.AsyncClient() as client:
            plain = await client.get(f"http://127.0.0.1:{ports['HTTP']}/ping")
            assert (plain.status_code, plain.text) == (200, "OK")
        context = ssl.create_default_context()
        authority.configure_trust(context)
        async with httpx.AsyncClient(verify=context) as client:
            secure = await client.get(f"https://127.0.0.1:{ports['HTTPS']}/stats?format=json")
            assert secure.status_code == 200
            assert [t["topic_name"] for t in secure.json()["topics"]] == ["scripted"]
        os.kill(pid, signal.SIGKILL)  # no goodbye: the ports must be reusable at once
        await restart_on(ports["TCP"], ports["HTTP"])
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


async def restart_on(tcp_port: int, http_port: int) -> None:
    """Start ``nsqd`` again on the same TCP and HTTP ports and see it answer."""
    process = await trio.lowlevel.open_process(
        [
            str(NSQD),
            f"-tcp-address=127.0.0.1:{tcp_port}",
            "-http-address",
            f"127.0.0.1:{http_port}",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert process.stderr is not None
        seen = b""
        with trio.fail_after(20):
            while seen.count(b"listening on") < 2:
                chunk = await process.stderr.receive_some(4096)
                assert chunk, seen
                seen += chunk
        assert f"TCP: listening on 127.0.0.1:{tcp_port}".encode() in seen
        async with httpx.AsyncClient() as client:
            answer = await client.get(f"http://127.0.0.1:{http_port}/ping")
            assert answer.text == "OK"
    finally:
        process.kill()
        await process.wait()

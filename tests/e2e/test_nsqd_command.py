"""The ``nsqd`` and ``nsqlookupd`` console scripts as scripts written for nsqd run them:
subprocesses, nsqd's flags, its stderr lines, its exit codes."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import trio

from trionsq import __version__
from trionsq.addresses import join_host_port
from trionsq.protocol import MAGIC_V2, Pub
from trionsq.protocol.client import ClientConnection, Response, encode_commands
from trionsq.server.statsd_lines import host_key

BIN = Path(sys.executable).parent
NSQD = BIN / "nsqd"
NSQLOOKUPD = BIN / "nsqlookupd"

LISTENING = re.compile(
    rb"^(?P<prefix>.*?)\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} INFO: "
    rb"(?P<proto>TCP|HTTP|HTTPS): listening on (?P<host>\[[^\]]*\]|[^\s:]+):(?P<port>\d+)$",
    re.MULTILINE,
)


def listening(stderr: bytes) -> dict[str, tuple[bytes, str, int]]:
    """The ``<PROTO>: listening on HOST:PORT`` lines nsqd prints: proto -> (log prefix,
    host, port). Takes TCP, HTTP and HTTPS, as a script waiting for nsqd would."""
    return {
        match["proto"].decode(): (
            match["prefix"],
            match["host"].decode().strip("[]"),
            int(match["port"]),
        )
        for match in LISTENING.finditer(stderr)
    }


class Nsqd:
    """An ``nsqd`` subprocess whose stderr is read until the wanted lines appear."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.stderr = b""

    @classmethod
    async def start(cls, *args: str) -> Nsqd:
        process = await trio.lowlevel.open_process(
            [str(NSQD), *args],
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=tempfile.mkdtemp(prefix="trionsq-nsqd-"),  # nsqd's default data path: cwd
        )
        return cls(process)

    async def wait_listening(self, *protos: str) -> dict[str, tuple[bytes, str, int]]:
        assert self.process.stderr is not None
        with trio.fail_after(20):
            while not all(proto in listening(self.stderr) for proto in protos):
                chunk = await self.process.stderr.receive_some(4096)
                assert chunk, f"nsqd exited early: {self.stderr!r}"
                self.stderr += chunk
        return listening(self.stderr)

    async def stop(self, signum: signal.Signals = signal.SIGTERM) -> int:
        self.process.send_signal(signum)
        with trio.fail_after(10):
            return await self.process.wait()

    async def aclose(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
            await self.process.wait()
        if self.process.stderr is not None:
            await self.process.stderr.aclose()


def run(*argv: str | Path) -> subprocess.CompletedProcess[bytes]:
    """Run a console script to its end (these exit at once)."""
    return subprocess.run(argv, capture_output=True, timeout=20, check=False)  # noqa: S603


async def publish(port: int, body: bytes) -> trio.SocketStream:
    """PUB over protocol V2 and check the OK; the connection stays open."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(MAGIC_V2 + encode_commands([Pub("t", body)]))
    with trio.fail_after(10):
        frames = ClientConnection().receive_data(await stream.receive_some(4096))
    assert isinstance(frames[0], Response)
    assert frames[0].is_ok
    return stream


async def test_nsqd_flags_in_go_syntax_and_a_config_file(tmp_path: Path) -> None:
    config = tmp_path / "nsqd.cfg"
    config.write_text(
        'log_prefix = "[from-config] "\nmsg_timeout = "30s"\ntcp_address = "0.0.0.0:1"\n'
    )
    nsqd = await Nsqd.start(
        "--tcp-address=127.0.0.1:0",
        "-http-address",
        "127.0.0.1:0",
        "--data-path",
        str(tmp_path),
        "-config",
        str(config),
        "-deflate=false",
        "-snappy",
    )
    try:
        lines = await nsqd.wait_listening("TCP")
        prefix, host, port = lines["TCP"]
        assert prefix == b"[from-config] "  # the file counts; the flag beat its tcp_address
        assert host == "127.0.0.1"
        assert port > 0
        stream = await publish(port, b"hello")
        await stream.aclose()
        assert await nsqd.stop(signal.SIGTERM) == 0
    finally:
        await nsqd.aclose()


async def test_restart_on_the_same_port_right_after_sigkill() -> None:
    first = await Nsqd.start("-tcp-address", "127.0.0.1:0", "-http-address=")
    try:
        port = (await first.wait_listening("TCP"))["TCP"][2]
        stream = await publish(port, b"before")  # an open connection survives the kill
        assert await first.stop(signal.SIGKILL) == -signal.SIGKILL
    finally:
        await first.aclose()
    second = await Nsqd.start(f"-tcp-address=127.0.0.1:{port}", "-http-address=")
    try:
        assert (await second.wait_listening("TCP"))["TCP"][2] == port
        await (await publish(port, b"after")).aclose()
        assert await second.stop(signal.SIGINT) == 0
    finally:
        await stream.aclose()
        await second.aclose()


def test_version_prints_nsqds_shape() -> None:
    for program, flag in ((NSQD, "--version"), (NSQD, "-version"), (NSQLOOKUPD, "--version")):
        result = run(program, flag)
        assert result.returncode == 0
        assert re.fullmatch(
            rb"nsq(lookup)?d v1\.3\.0 \(built w/trionsq-\d+\.\d+\.\d+\)\n", result.stdout
        ), result.stdout
        assert result.stderr == b""


GNSQ_VERSION_LINE = re.compile(
    r"(?P<name>[a-z]+) v(?P<version>[0-9]+\.[0-9]+\.[0-9]+)(?:-[a-z]+)? "
    r"\(built w/(?P<built_with>[a-z0-9.-]+)\)"
)
"""How gnsq's integration harness reads ``--version`` to choose what to expect
(HTTPS from 0.2.28, port 0 from 0.3.5): the line must match from its start."""


def test_version_line_reads_as_nsqd_1_3_0_to_gnsqs_harness() -> None:
    for program, name in ((NSQD, "nsqd"), (NSQLOOKUPD, "nsqlookupd")):
        match = GNSQ_VERSION_LINE.match(run(program, "--version").stdout.decode())
        assert match is not None
        assert match["name"] == name
        assert tuple(int(part) for part in match["version"].split(".")) == (1, 3, 0)
        assert match["built_with"] == f"trionsq-{__version__}"


def test_trionsq_reports_its_own_version() -> None:
    result = run(BIN / "trionsq", "--version")
    assert (result.returncode, result.stdout) == (0, f"trionsq, version {__version__}\n".encode())


def test_unknown_flag_is_one_line_and_exit_2() -> None:
    result = run(NSQD, "-tcp-address=127.0.0.1:0", "--no-such-flag=1")
    assert result.returncode == 2
    assert result.stderr == b"flag provided but not defined: -no-such-flag\n"
    assert result.stdout == b""


def test_refused_configuration_is_one_fatal_line_and_exit_1() -> None:
    result = run(NSQD, "-tcp-address=127.0.0.1:0", "-max-deflate-level", "10")
    assert result.returncode == 1
    assert re.fullmatch(
        rb"\[nsqd\] \S+ \S+ FATAL: --max-deflate-level must be in \[1,9\], got 10\n", result.stderr
    ), result.stderr


def test_nsqlookupd_refused_configuration_is_one_fatal_line_and_exit_1() -> None:
    result = run(NSQLOOKUPD, "-tcp-address=nonsense", "--http-address", "127.0.0.1:0")
    assert result.returncode == 1
    assert re.fullmatch(
        rb"\[nsqlookupd\] \S+ \S+ FATAL: --tcp-address must be <addr>:<port>[^\n]*\n", result.stderr
    ), result.stderr


def test_a_corrupt_metadata_file_is_refused_in_one_fatal_line(tmp_path: Path) -> None:
    (tmp_path / "metadata.json").write_bytes(b'{"version":1,"topics":[')
    for command in ((NSQD,), (BIN / "trionsq", "serve")):
        result = run(
            *command,
            f"--data-path={tmp_path}",
            "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:0",
        )
        assert result.returncode == 1
        fatal = [line for line in result.stderr.splitlines() if b"FATAL" in line]
        assert len(fatal) == 1, result.stderr
        assert re.fullmatch(
            rb"\[nsqd\] \S+ \S+ FATAL: cannot start: \S*metadata\.json: not JSON \(.*\)", fatal[0]
        ), fatal[0]
        assert b"Traceback" not in result.stderr
        assert (tmp_path / "metadata.json").read_bytes() == b'{"version":1,"topics":['


def test_a_port_in_use_is_the_one_cannot_listen_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run(NSQD, f"--data-path={tmp_path}", f"--tcp-address=127.0.0.1:{port}")
    assert result.returncode == 1
    assert re.fullmatch(
        rb"(?s).*\[nsqd\] \S+ \S+ FATAL: cannot listen: 127\.0\.0\.1:%d: Address already in use\n"
        % port,
        result.stderr,
    ), result.stderr


def test_a_data_path_that_is_not_a_directory_cannot_start_and_says_why(tmp_path: Path) -> None:
    """Any other start failure is not reported as a listener's (issue 14)."""
    data = tmp_path / "data"
    data.write_bytes(b"a file")
    result = run(NSQD, f"--data-path={data}", "--tcp-address=127.0.0.1:0")
    assert result.returncode == 1
    fatal = [line for line in result.stderr.splitlines() if b"FATAL" in line]
    assert len(fatal) == 1, result.stderr
    assert re.fullmatch(rb"\[nsqd\] \S+ \S+ FATAL: cannot start: \S+: .+", fatal[0]), fatal
    assert b"cannot listen" not in result.stderr
    assert b"Traceback" not in result.stderr


@pytest.mark.parametrize("command", [(NSQD,), (BIN / "trionsq", "serve")], ids=["nsqd", "serve"])
async def test_statsd_options_push_to_the_address_without_a_warning(
    command: tuple[Path, ...], tmp_path: Path
) -> None:
    with trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM) as statsd:
        await statsd.bind(("127.0.0.1", 0))
        port = statsd.getsockname()[1]
        process = await trio.lowlevel.open_process(
            [
                *map(str, command),
                "--tcp-address=127.0.0.1:0",
                "--http-address=127.0.0.1:0",
                f"--statsd-address=127.0.0.1:{port}",
                "--statsd-interval=100ms",
                "--statsd-prefix=nsq.%s.test",
            ],
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=tmp_path,
        )
        try:
            assert process.stderr is not None
            seen = b""
            with trio.fail_after(20):
                while b"STATSD: pushing stats to" not in seen or "HTTP" not in listening(seen):
                    chunk = await process.stderr.receive_some(4096)
                    assert chunk, f"exited early: {seen!r}"
                    seen += chunk
                datagram = await statsd.recv(65536)
            http_port = listening(seen)["HTTP"][2]
            key = host_key(join_host_port(socket.gethostname(), http_port))
            lines = datagram.decode().splitlines()
            assert lines
            assert all(line.startswith(f"nsq.{key}.test.") for line in lines), lines
            assert re.search(rb"INFO: STATSD: pushing stats to 127\.0\.0\.1:%d\n" % port, seen)
            process.send_signal(signal.SIGTERM)
            with trio.fail_after(10):
                assert await process.wait() == 0
                while chunk := await process.stderr.receive_some(4096):
                    seen += chunk
            assert b"WARNING" not in seen, seen
            assert b"statsd is not built yet" not in seen
        finally:
            if process.returncode is None:
                process.kill()

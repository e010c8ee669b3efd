"""etcd with TLS, client certificates and users, as production runs it: the client
authenticates and renews its token, brokers and the lookupd replicate and fail over
through it, a refusal at start is one line, a refusal later degrades ``/ping``.

One etcd for the module (TLS on its client port, ``--client-cert-auth``, users on,
simple tokens that expire after one second unused: every test here crosses expiries).
"""

from __future__ import annotations

import base64
import subprocess
import time
import urllib.error
from typing import TYPE_CHECKING, Final

import httpx
import pytest
import trio
import trustme

from tests.cluster.etcd_proxy import EtcdProxy, Trouble
from tests.cluster.failover_run import History, Lookup, ping, run_failover, run_history
from trionsq import NsqdConfig, serve_nsqd
from trionsq.cluster.etcd import EtcdClient, EtcdRefused, EtcdUnavailable
from trionsq.cluster.etcd_access import EtcdAccess
from trionsq.cluster.etcd_json import Compare, Op
from trionsq.cluster.etcd_process import EtcdTls, etcd_available, free_port, start_etcd
from trionsq.cluster.keys import ClusterKeys
from trionsq.cluster.local_cluster import TRIONSQ, LocalCluster
from trionsq.testing import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from trionsq.cluster.etcd_json import WatchBatch
    from trionsq.cluster.etcd_process import EtcdServer

PASSWORD: Final = "s3cret-etcd-pw"  # noqa: S105 - the test etcd's


def _tls_files(directory: Path) -> tuple[EtcdTls, Path]:
    """A CA, etcd's certificate, a client certificate (its name is no etcd user, so
    only the password authenticates), and another CA's bundle (the wrong one)."""
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("trionsq-client.example")
    paths = {name: directory / f"{name}.pem" for name in ("ca", "sc", "sk", "cc", "ck", "other")}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    server.cert_chain_pems[0].write_to_path(str(paths["sc"]))
    server.private_key_pem.write_to_path(str(paths["sk"]))
    client.cert_chain_pems[0].write_to_path(str(paths["cc"]))
    client.private_key_pem.write_to_path(str(paths["ck"]))
    trustme.CA().cert_pem.write_to_path(str(paths["other"]))
    tls = EtcdTls(paths["ca"], paths["sc"], paths["sk"], paths["cc"], paths["ck"])
    return tls, paths["other"]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EtcdServer, Path]]:
    """The module's etcd (TLS, client certificates, user root), and a wrong CA file."""
    if not etcd_available():
        pytest.fail("etcd is not installed: `make unit` installs Debian's etcd-server")
    directory = tmp_path_factory.mktemp("secure-etcd")
    tls, wrong_ca = _tls_files(directory)
    server = start_etcd(directory / "etcd", tls=tls, extra=("--auth-token-ttl=1",))
    try:
        server.enable_auth(PASSWORD)
        yield server, wrong_ca
    finally:
        server.stop()


def _tls(etcd: EtcdServer) -> EtcdTls:
    tls = etcd.members[0].tls
    assert tls is not None
    return tls


def _access(etcd: EtcdServer, **changes: str) -> EtcdAccess:
    tls = _tls(etcd)
    given = {
        "cacert": str(tls.ca),
        "cert": str(tls.client_cert),
        "key": str(tls.client_key),
        "username": "root",
        "password": PASSWORD,
    }
    given.update(changes)
    return EtcdAccess(**given)


def _flags(etcd: EtcdServer) -> tuple[str, ...]:
    """trionsq's flags for the module's etcd (Youzan's names for the user)."""
    return (
        *_tls(etcd).client_flags,
        "--cluster-leadership-username=root",
        f"--cluster-leadership-password={PASSWORD}",
    )


async def _until_tokens_expired(etcd: EtcdServer) -> None:
    """Until a token taken now and left unused is refused: every token last used
    before it is gone too. (Each use gives a simple token its TTL again, so each try
    takes a new token and uses it once, a little later each time.)"""
    wait = 1.2
    request: dict[str, object] = {"key": "AA=="}
    with trio.fail_after(15):
        while True:
            token = await trio.to_thread.run_sync(etcd.token, PASSWORD)
            await trio.sleep(wait)
            try:
                await trio.to_thread.run_sync(
                    etcd.members[0].gateway, "/v3/kv/range", request, token
                )
            except urllib.error.HTTPError as error:
                refused = error.code
                break
            wait += 0.5
    assert refused == 401


async def _watched(client: EtcdClient, prefix: bytes, revision: int, count: int) -> list[bytes]:
    """The keys of the first ``count`` events a watch from ``revision`` hands on."""
    seen: list[bytes] = []
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:

            def on_batch(batch: WatchBatch) -> None:
                seen.extend(event.kv.key for event in batch.events)
                if len(seen) >= count:
                    nursery.cancel_scope.cancel()

            nursery.start_soon(client.watch_prefix, prefix, revision, on_batch)
    return seen


async def test_calls_leases_and_watches_go_on_past_token_expiry(
    secured: tuple[EtcdServer, Path], cluster_id: str
) -> None:
    """A token expired (1 s unused), then every token dropped by etcd (root's
    password set again), before a call, a lease renewal and a watch's creation."""
    etcd, _ = secured
    async with EtcdClient(etcd.endpoints, access=_access(etcd)) as client:
        key = f"/{cluster_id}/k".encode()
        revision = await client.put(key, b"1")
        lease = await client.grant(60)
        assert client.authentications == 1
        await _until_tokens_expired(etcd)
        kv = await client.get(key)  # refused as expired, authenticated again, answered
        assert kv is not None
        assert kv.value == b"1"
        assert client.authentications == 2
        await trio.to_thread.run_sync(_change_password, etcd, PASSWORD, PASSWORD)
        assert await client.keep_alive_once(lease) >= 1
        await client.check()  # what keep_alive does after each renewal, with a user
        assert client.authentications == 3
        await trio.to_thread.run_sync(_change_password, etcd, PASSWORD, PASSWORD)
        assert await _watched(client, key, revision, 1) == [key]  # created again, new token
        assert client.authentications == 4
        assert client.refused == ""


async def test_calls_over_tls_with_a_user_reuse_one_connection(
    secured: tuple[EtcdServer, Path], cluster_id: str
) -> None:
    """One TLS handshake (client certificate) and one token for 30 calls, where a
    connection per call made one handshake each."""
    etcd, _ = secured
    proxy = EtcdProxy(etcd.endpoints[0])
    key = f"/{cluster_id}/k".encode()
    async with trio.open_nursery() as nursery:
        url = await nursery.start(proxy.serve)
        async with EtcdClient([url], access=_access(etcd)) as client:
            lease = await client.grant(10)
            for value in range(10):
                await client.put(key, b"%d" % value, lease=lease)
                kv = await client.get(key)
                assert kv is not None
                assert kv.value == b"%d" % value
                assert await client.keep_alive_once(lease) >= 1
            assert (proxy.accepted, client.authentications) == (1, 1)
        await wait_until(lambda: proxy.open == 0, "the kept connection closed with the client")
        nursery.cancel_scope.cancel()


async def test_a_tls_connection_lost_is_no_refusal(
    secured: tuple[EtcdServer, Path], cluster_id: str
) -> None:
    """etcd restarted under kept TLS connections (and its tokens gone with it), then
    a reply lost after a put went out, one cut in the middle of a TLS record, one
    garbled: each call goes on or fails as etcd out of reach, never as etcd refusing
    the certificates (which would stop a starting broker and degrade ``/ping``)."""
    etcd, _ = secured
    key = f"/{cluster_id}/k".encode()
    proxy = EtcdProxy(etcd.endpoints[0])
    async with trio.open_nursery() as nursery:
        url = await nursery.start(proxy.serve)
        async with EtcdClient([url], access=_access(etcd)) as client:
            await client.put(key, b"0")
            for value in (b"1", b"2"):
                await trio.to_thread.run_sync(etcd.stop)
                await trio.to_thread.run_sync(etcd.start)
                await client.put(key, value)
            troubles: tuple[tuple[Trouble, bytes, int], ...] = (
                ("drop reply", b"3", 4),
                ("cut reply", b"4", 5),  # half a TLS record, then the connection closes
                ("garble reply", b"5", 6),  # a TLS record that fails its check
            )
            for trouble, value, version in troubles:
                proxy.trouble = trouble
                with pytest.raises(EtcdUnavailable) as lost:
                    await client.put(key, value)
                assert not isinstance(lost.value, EtcdRefused), (trouble, lost.value)
                kv = await client.get(key)  # a new connection, kept
                assert kv is not None
                assert (kv.value, kv.version) == (value, version)
            assert client.refused == ""
        nursery.cancel_scope.cancel()


async def test_three_tls_members_with_users_go_on_without_the_member_in_use(
    tmp_path: Path,
) -> None:
    """Three members, each serving TLS with client certificates and users (production's
    shape): the client given all three goes on when the member it was talking to dies,
    its kept connection with it: calls, a lease renewal, a compare-and-set and a watch,
    authenticating again if the member now answering refuses the token."""
    tls, _ = _tls_files(tmp_path)
    etcd = start_etcd(tmp_path / "etcd", members=3, tls=tls)
    try:
        etcd.enable_auth(PASSWORD)
        assert all(url.startswith("https://") for url in etcd.endpoints)
        async with EtcdClient(etcd.endpoints, timeout=1.0, access=_access(etcd)) as client:
            key = b"/three/k"
            lease = await client.grant(10)
            first = await client.put(key, b"1", lease=lease)
            assert client.authentications == 1
            await trio.to_thread.run_sync(etcd.members[0].stop)  # the one it talked to
            assert await client.put(key, b"2", lease=lease) > first
            assert await client.keep_alive_once(lease) >= 1
            kv = await client.get(key)
            assert kv is not None
            assert kv.value == b"2"
            txn = await client.txn([Compare(key, "VALUE", "EQUAL", b"2")], [Op("put", key, b"3")])
            assert txn.succeeded
            assert await _watched(client, key, first, 3) == [key, key, key]
            assert client.refused == ""
            assert client.authentications <= 2
    finally:
        etcd.stop()


async def test_a_role_limited_to_the_clusters_keys_is_enough(
    secured: tuple[EtcdServer, Path], cluster_id: str
) -> None:
    """What the docs promise an operator: readwrite on ``/trionsq/<cluster-id>/``."""
    etcd, _ = secured
    root = ClusterKeys(cluster_id).root
    member, token = etcd.members[0], await trio.to_thread.run_sync(etcd.token, PASSWORD)
    end = root[:-1] + bytes([root[-1] + 1])
    permission = {"permType": "READWRITE", "key": _b64(root), "range_end": _b64(end)}
    requests: tuple[tuple[str, dict[str, object]], ...] = (
        ("/v3/auth/user/add", {"name": cluster_id, "password": "pw2"}),
        ("/v3/auth/role/add", {"name": cluster_id}),
        ("/v3/auth/role/grant", {"name": cluster_id, "perm": permission}),
        ("/v3/auth/user/grant", {"user": cluster_id, "role": cluster_id}),
    )
    for path, request in requests:
        await trio.to_thread.run_sync(member.gateway, path, request, token)
    access = _access(etcd, username=cluster_id, password="pw2")  # noqa: S106 - the test user's
    async with EtcdClient(etcd.endpoints, access=access, probe_key=root) as client:
        await client.check()
        lease = await client.grant(10)
        revision = await client.put(root + b"brokers/b", b"1", lease=lease)
        assert await client.keep_alive_once(lease) >= 1
        assert (await client.txn([Compare(root + b"k", "CREATE", "EQUAL", 0)], [])).succeeded
        assert await _watched(client, root, revision, 1) == [root + b"brokers/b"]
        await client.revoke(lease)
        with pytest.raises(EtcdRefused, match="permission denied"):
            await client.get(b"/elsewhere")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("wrong password", "authentication failed, invalid user ID or password"),
        ("no user", "a client without user (--etcd-username, --etcd-password)"),
        ("wrong CA", "CERTIFICATE_VERIFY_FAILED: unable to get local issuer certificate"),
        ("no client certificate", "etcd wants a client certificate it trusts"),
        ("http to a TLS etcd", "is etcd serving TLS? use https://"),
    ],
)
async def test_the_client_names_what_etcd_refused(
    secured: tuple[EtcdServer, Path], case: str, words: str
) -> None:
    etcd, wrong_ca = secured
    urls = etcd.endpoints
    access = {
        "wrong password": _access(etcd, password="wrong"),  # noqa: S106 - wrong on purpose
        "no user": _access(etcd, username="", password=""),
        "wrong CA": _access(etcd, cacert=str(wrong_ca)),
        "no client certificate": _access(etcd, cert="", key=""),
        "http to a TLS etcd": EtcdAccess(username="root", password=PASSWORD),
    }[case]
    if case == "http to a TLS etcd":
        urls = [url.replace("https://", "http://") for url in urls]
    async with EtcdClient(urls, timeout=2.0, access=access) as client:
        with pytest.raises(EtcdRefused) as refused:
            await client.check()
        assert words in str(refused.value)
        assert client.refused == str(refused.value)
        assert PASSWORD not in str(refused.value)


async def test_a_refused_password_is_not_tried_again_at_once(
    secured: tuple[EtcdServer, Path],
) -> None:
    """Each try costs etcd a bcrypt: brokers left with an old password must not
    spend its CPU. Ten calls within the back-off cost etcd one authentication."""
    etcd, _ = secured
    log = etcd.members[0].directory / "etcd.log"

    def failures() -> int:
        return log.read_text().count("authentication failed, invalid password")

    before = failures()
    async with EtcdClient(etcd.endpoints, access=_access(etcd, password="wrong")) as client:  # noqa: S106 - wrong on purpose
        for _ in range(10):
            with pytest.raises(EtcdRefused, match="authentication failed"):
                await client.check()
        assert failures() == before + 1


def _serve_arguments(etcd: EtcdServer, tmp_path: Path, *etcd_flags: str) -> list[str]:
    return [
        TRIONSQ,
        "serve",
        f"--tcp-address=127.0.0.1:{free_port()}",
        f"--http-address=127.0.0.1:{free_port()}",
        f"--data-path={tmp_path}",
        f"--etcd-endpoints={','.join(etcd.endpoints)}",
        *etcd_flags,
    ]


@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("wrong password", "authentication failed"),
        ("wrong CA", "CERTIFICATE_VERIFY_FAILED"),
        ("no client certificate", "client certificate"),
        ("http to a TLS etcd", "is etcd serving TLS?"),
    ],
)
def test_serve_refused_by_etcd_exits_with_one_line(
    secured: tuple[EtcdServer, Path], tmp_path: Path, case: str, words: str
) -> None:
    etcd, wrong_ca = secured
    tls = _tls(etcd)
    user = ("--etcd-username=root", f"--etcd-password={PASSWORD}")
    arguments = {
        "wrong password": _serve_arguments(
            etcd, tmp_path, *tls.client_flags, "--etcd-username=root", "--etcd-password=nope"
        ),
        "wrong CA": _serve_arguments(
            etcd,
            tmp_path,
            f"--etcd-cacert={wrong_ca}",
            f"--etcd-cert={tls.client_cert}",
            f"--etcd-key={tls.client_key}",
            *user,
        ),
        "no client certificate": _serve_arguments(etcd, tmp_path, f"--etcd-cacert={tls.ca}", *user),
        "http to a TLS etcd": [
            url.replace("https://", "http://") for url in _serve_arguments(etcd, tmp_path, *user)
        ],
    }[case]
    done = subprocess.run(arguments, capture_output=True, timeout=60, check=False)  # noqa: S603 - our own arguments
    output = (done.stdout + done.stderr).decode()
    lines = [line for line in output.splitlines() if line.strip()]
    assert done.returncode == 1, output
    assert "Traceback" not in output
    refusal = [line for line in lines if "cannot start: etcd refused" in line]
    assert len(refusal) == 1, output
    assert words in refusal[0], output
    assert PASSWORD not in output


def test_a_lookupd_refused_by_etcd_exits_with_one_line(
    secured: tuple[EtcdServer, Path],
) -> None:
    etcd, _ = secured
    arguments = [
        TRIONSQ,
        "lookupd",
        f"--tcp-address=127.0.0.1:{free_port()}",
        f"--http-address=127.0.0.1:{free_port()}",
        f"--etcd-endpoints={','.join(etcd.endpoints)}",
        *_tls(etcd).client_flags,
        "--etcd-username=root",
        "--etcd-password=nope",
    ]
    done = subprocess.run(arguments, capture_output=True, timeout=60, check=False)  # noqa: S603 - our own arguments
    output = (done.stdout + done.stderr).decode()
    assert done.returncode == 1, output
    assert "Traceback" not in output
    assert output.count("cannot start: etcd refused") == 1, output
    assert "authentication failed" in output


async def test_the_password_is_never_shown(
    secured: tuple[EtcdServer, Path],
    cluster_id: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    etcd, _ = secured
    tls = _tls(etcd)
    config = NsqdConfig.loopback(
        data_path=str(tmp_path),
        etcd_endpoints=tuple(etcd.endpoints),
        etcd_cacert=str(tls.ca),
        etcd_cert=str(tls.client_cert),
        etcd_key=str(tls.client_key),
        etcd_username="root",
        etcd_password=PASSWORD,
        cluster_id=cluster_id,
        broadcast_address="127.0.0.1",
    )
    assert PASSWORD not in repr(config)
    async with trio.open_nursery() as nursery:
        addresses = await nursery.start(serve_nsqd, config)
        assert addresses.http is not None
        base = f"http://127.0.0.1:{addresses.http[1]}"
        async with httpx.AsyncClient(base_url=base) as http:
            assert (await http.get("/ping")).text == "OK"
            password = await http.get("/config/etcd_password")
            assert (password.status_code, password.json()) == (
                400,
                {"message": "INVALID_OPTION"},
            ), password.text
            username = await http.get("/config/etcd_username")
            assert username.json() == "root"
            for path in ("/stats?format=json", "/info", "/stats", "/metrics"):
                answer = await http.get(path)
                assert PASSWORD not in answer.text, path
        nursery.cancel_scope.cancel()
    assert PASSWORD not in caplog.text


async def test_replicated_topic_and_failover_through_tls_and_users(
    secured: tuple[EtcdServer, Path], cluster_id: str, tmp_path: Path
) -> None:
    """etcd drops every token of root at once (its password set again): the brokers
    and the lookupd authenticate anew; then a topic is created, published to
    (acknowledged), consumed, and its leader killed and replaced, with tokens that
    expire after 1 s unused."""
    etcd, _ = secured
    cluster = LocalCluster(tmp_path, etcd, cluster_id=cluster_id, etcd_flags=_flags(etcd))
    try:
        cluster.start(3)
        logs = [broker.directory / "broker.log" for broker in cluster.brokers]
        logs.append(tmp_path / "lookupd.log")
        await trio.to_thread.run_sync(_change_password, etcd, PASSWORD, PASSWORD)

        def all_authenticated_again() -> bool:
            return all("etcd: new token" in log.read_text() for log in logs)

        await wait_until(all_authenticated_again, "every process authenticated again", within=10)
        history, verdict = await run_failover(cluster, partitions=2, replicas=3, kills=1, pause=1.5)
        pings = [await ping(broker.host, broker.http_port) for broker in cluster.brokers]
    finally:
        cluster.stop()
    assert verdict.acknowledged > 20, history.errors
    assert verdict.lost == []
    assert verdict.phantom == []
    assert verdict.duplicated == []
    assert len(verdict.failover_seconds) == 1
    assert pings == ["OK"] * 3
    assert all(PASSWORD not in log.read_text() for log in logs)


def _change_password(etcd: EtcdServer, old: str, new: str) -> None:
    token = etcd.token(old)
    etcd.members[0].gateway("/v3/auth/user/changepw", {"name": "root", "password": new}, token)


def _acknowledged(history: History) -> int:
    return sum(len(acks) for acks in history.acked.values())


async def _until_pings(cluster: LocalCluster, start: str) -> list[str]:
    with trio.fail_after(15):
        while True:
            pings = [await ping(broker.host, broker.http_port) for broker in cluster.brokers]
            if all(body.startswith(start) for body in pings):
                return pings
            await trio.sleep(0.2)


async def test_a_password_changed_in_etcd_degrades_ping_and_the_brokers_keep_serving(
    secured: tuple[EtcdServer, Path], cluster_id: str, tmp_path: Path
) -> None:
    etcd, _ = secured
    cluster = LocalCluster(tmp_path, etcd, cluster_id=cluster_id, etcd_flags=_flags(etcd))
    refused: list[str] = []
    changed_at = 0.0

    async def disrupt(lookup: Lookup, history: History) -> None:
        nonlocal changed_at
        await trio.sleep(0.5)
        await trio.to_thread.run_sync(_change_password, etcd, PASSWORD, "changed")
        changed_at = time.monotonic()
        try:
            refused.extend(await _until_pings(cluster, "NOK - etcd refuses this broker"))
            acked = _acknowledged(history)

            def twenty_more() -> bool:  # the leaders keep acknowledging meanwhile
                return _acknowledged(history) >= acked + 20

            await wait_until(twenty_more, "20 more acknowledged while refused", within=10)
        finally:
            await trio.to_thread.run_sync(_change_password, etcd, "changed", PASSWORD)
        await _until_pings(cluster, "OK")

    try:
        cluster.start(2)
        history, verdict = await run_history(cluster, partitions=1, replicas=2, disrupt=disrupt)
    finally:
        cluster.stop()
    assert all("authentication failed" in body for body in refused), refused
    assert verdict.lost == []
    assert verdict.phantom == []
    assert any(at > changed_at for _, at, _ in history.acked[0])

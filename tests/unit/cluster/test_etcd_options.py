"""The options that secure etcd (TLS files, user): on ``trionsq serve``/``lookupd``,
nsqd's Go flags (Youzan's names too) and the TOML file; checked at start, one line."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import trustme

from tests.unit.test_serve_options import lookupd_config, serve_config
from trionsq import goflags
from trionsq.config import ConfigError, NsqdConfig
from trionsq.nsqd_command import build_nsqd_config
from trionsq.options import NSQD_FLAGS

if TYPE_CHECKING:
    from pathlib import Path

HTTPS = "--etcd-endpoints=https://127.0.0.1:2379"


@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A CA and a client pair, as files."""
    directory = tmp_path_factory.mktemp("pem")
    ca = trustme.CA()
    client = ca.issue_cert("client.example")
    paths = {name: str(directory / f"{name}.pem") for name in ("ca", "cert", "key")}
    ca.cert_pem.write_to_path(paths["ca"])
    client.cert_chain_pems[0].write_to_path(paths["cert"])
    client.private_key_pem.write_to_path(paths["key"])
    return paths


def test_https_endpoints_with_tls_files_and_a_user(pem: dict[str, str]) -> None:
    config = serve_config(
        [
            HTTPS,
            f"--etcd-cacert={pem['ca']}",
            f"--etcd-cert={pem['cert']}",
            f"--etcd-key={pem['key']}",
            "--etcd-username=root",
            "--etcd-password=pw",
        ]
    )
    access = config.etcd_access
    assert (access.cacert, access.cert, access.key) == (pem["ca"], pem["cert"], pem["key"])
    assert (access.username, access.password) == ("root", "pw")
    assert "pw" not in repr(config)
    assert "pw" not in repr(access)


def test_youzan_names_of_the_user_on_both_commands() -> None:
    youzan = [HTTPS, "--cluster-leadership-username=u", "--cluster-leadership-password=p"]
    for config in (serve_config(youzan), lookupd_config(youzan)):
        assert (config.etcd_username, config.etcd_password) == ("u", "p")
    parsed = goflags.parse(
        NSQD_FLAGS,
        ["-etcd-endpoints=https://h:1", "-cluster-leadership-username=u", "-etcd-password=p"],
    )
    assert build_nsqd_config(parsed).etcd_access.username == "u"


def test_the_toml_file_takes_the_keys(tmp_path: Path) -> None:
    file = tmp_path / "nsqd.toml"
    file.write_text(
        'etcd_endpoints = ["https://h:2379"]\n'
        'cluster_leadership_username = "u"\n'
        'etcd_password = "p"\n'
    )
    config = build_nsqd_config(goflags.parse(NSQD_FLAGS, [f"-config={file}"]))
    assert (config.etcd_username, config.etcd_password) == ("u", "p")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--etcd-endpoints=ftp://h:1"], "takes http(s)://<host>:<port> URLs, got 'ftp://h:1'"),
        (["--etcd-endpoints=https://h"], "takes http(s)://<host>:<port> URLs"),
        (["--etcd-endpoints=http://a:1,https://b:1"], "mixes http:// and https:// URLs"),
        (
            ["--etcd-endpoints=http://a:1", "--etcd-cacert=/x"],
            "--etcd-cacert, --etcd-cert and --etcd-key need https:// endpoints",
        ),
        ([HTTPS, "--etcd-cert=/x"], "--etcd-cert and --etcd-key go together"),
        ([HTTPS, "--etcd-username=root"], "--etcd-username and --etcd-password go together"),
        ([HTTPS, "--cluster-leadership-password=p"], "--etcd-username and --etcd-password"),
        (
            [HTTPS, "--etcd-cacert=/nonexistent/ca.pem"],
            "--etcd-cacert '/nonexistent/ca.pem': No such file or directory",
        ),
    ],
)
def test_refused_with_one_line(args: list[str], message: str) -> None:
    for build in (serve_config, lookupd_config):
        with pytest.raises(ConfigError) as refused:
            build(args)
        assert message in str(refused.value)
        assert "\n" not in str(refused.value)


def test_a_key_that_is_not_pem_is_refused(pem: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match=r"--etcd-cert .* / --etcd-key .*: \[SSL"):
        NsqdConfig.loopback(
            etcd_endpoints=("https://h:1",), etcd_cert=pem["cert"], etcd_key=pem["ca"]
        ).validate()


def test_help_lists_them() -> None:
    usage = goflags.usage(NSQD_FLAGS, "nsqd")
    for flag in ("etcd-cacert", "etcd-cert", "etcd-key", "etcd-username", "etcd-password"):
        assert f"-{flag}" in usage
    assert "-cluster-leadership-password" in usage

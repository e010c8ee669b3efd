"""The TubeMQ *_pb2 modules that setup.py generated at install are what protoc makes of
the .proto files beside them (`make proto` regenerates them): a .proto edited without a
reinstall fails here, not at run time."""

from __future__ import annotations

import pathlib

from grpc_tools import protoc

SRC = pathlib.Path(__file__).parents[3] / "src"
PROTO_DIR = SRC / "trionsq" / "protocol" / "tubemq_proto"


def test_generated_modules_match_their_proto_files(tmp_path: pathlib.Path) -> None:
    protos = sorted(PROTO_DIR.glob("*.proto"))
    assert [p.name for p in protos] == ["broker.proto", "master.proto", "rpc.proto", "sends.proto"]
    args = [
        "protoc",
        f"-I{SRC}",
        f"--python_out={tmp_path}",
        f"--pyi_out={tmp_path}",
        *(str(p.relative_to(SRC)) for p in protos),
    ]
    assert protoc.main(args) == 0
    made = tmp_path / "trionsq" / "protocol" / "tubemq_proto"
    for proto in protos:
        for suffix in ("_pb2.py", "_pb2.pyi"):
            name = proto.stem + suffix
            assert (made / name).read_text() == (PROTO_DIR / name).read_text(), (
                f"{name} is stale: run `make proto`"
            )

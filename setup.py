"""Build hooks; everything else is in pyproject.toml.

- ``build_proto``: TubeMQ's messages (docs/tubemq.md) are protoc's Python modules
  (``*_pb2.py`` and their ``*_pb2.pyi`` stubs) of the ``.proto`` files in
  ``trionsq/protocol/tubemq_proto``, generated here, beside those files, by the
  grpcio-tools pinned in ``[build-system] requires`` rather than committed: every build
  (``pip install .``, ``pip install -e .``, ``pip wheel .``) runs it before the modules
  are collected, so the code always matches its ``.proto``.
- ``trionsq._speedups`` is optional: where no C compiler or Python headers exist the
  build skips it and trionsq runs its pure-Python twins (trionsq/speedups.py).
"""

from __future__ import annotations

import pathlib

from setuptools import Command, Extension, setup
from setuptools.command.build import build
from setuptools.errors import ExecError

SRC = pathlib.Path(__file__).parent / "src"
PROTO_DIR = SRC / "trionsq" / "protocol" / "tubemq_proto"


class BuildProto(Command):
    """Generate the TubeMQ ``*_pb2`` modules from the ``.proto`` files beside them.

    It writes into the source tree (not build_lib) because an editable install imports
    from there; a regular build then copies the modules like any other.
    """

    description = "generate the TubeMQ protobuf modules (protoc, from grpcio-tools)"
    user_options: list[tuple[str, str | None, str]] = []  # noqa: RUF012 (setuptools' API)

    def initialize_options(self) -> None:
        pass

    def finalize_options(self) -> None:
        pass

    def run(self) -> None:
        from grpc_tools import protoc  # a build requirement: not importable before the build

        protos = sorted(p.relative_to(SRC).as_posix() for p in PROTO_DIR.glob("*.proto"))
        args = ["protoc", f"-I{SRC}", f"--python_out={SRC}", f"--pyi_out={SRC}", *protos]
        if protoc.main(args) != 0:
            raise ExecError(f"protoc failed on {', '.join(protos)}")


class BuildWithProto(build):
    """``build`` whose first step is ``build_proto``: the modules exist before
    ``build_py`` looks for the package's modules (an editable install runs the same
    steps)."""

    sub_commands = [("build_proto", None), *build.sub_commands]  # noqa: RUF012


setup(
    cmdclass={"build": BuildWithProto, "build_proto": BuildProto},
    ext_modules=[
        Extension(
            "trionsq._speedups",
            ["src/trionsq/_speedups.c"],
            depends=[  # included by _speedups.c
                "src/trionsq/_speedups_encode.c",
                "src/trionsq/_speedups_publish.c",
                "src/trionsq/_speedups_replica.c",
                "src/trionsq/_speedups_append.c",
                "src/trionsq/_speedups_bodies.c",
                "src/trionsq/_speedups_records.c",
            ],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ],
)

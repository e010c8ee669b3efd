"""The protocol package is pure: importing it must not import trio."""

from __future__ import annotations

import subprocess
import sys


def test_protocol_imports_without_trio() -> None:
    code = (
        "import sys\n"
        "import trionsq.protocol, trionsq.protocol.client, trionsq.protocol.lookupd\n"
        "import trionsq.protocol.broker_errors, trionsq.protocol.compression\n"
        "import trionsq.protocol.tubemq, trionsq.protocol.tubemq_formats\n"
        "bad = sorted(m for m in sys.modules if m == 'trio' or m.startswith('trio.'))\n"
        "print(','.join(bad))\n"
        "sys.exit(1 if bad else 0)\n"
    )
    result = subprocess.run(  # noqa: S603 - our own interpreter and fixed code
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, f"protocol imported {result.stdout.strip()} {result.stderr}"

"""Build hook for the optional C speedups; everything else is in pyproject.toml.

``trionsq._speedups`` is optional: where no C compiler or Python headers exist the
build skips it and trionsq runs its pure-Python twins (trionsq/speedups.py).
"""

from __future__ import annotations

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "trionsq._speedups",
            ["src/trionsq/_speedups.c"],
            depends=[  # included by _speedups.c
                "src/trionsq/_speedups_publish.c",
                "src/trionsq/_speedups_replica.c",
                "src/trionsq/_speedups_append.c",
            ],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)

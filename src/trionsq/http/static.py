"""Files shipped inside a package, answered as they are (the admin page's HTML, JS, CSS).

Generic on purpose: it knows no broker and no endpoint, only "this path answers that
file of that package". A file is read through :mod:`importlib.resources` (so it works
from a wheel or a zip as from the source tree) the first time it is asked for, then
kept: a broker that never serves its admin page never reads it. Answers carry
``Cache-Control: no-cache`` so a browser revalidates after an upgrade instead of
running an old script against a new stream. HEAD gets the same answer, whose body the
connection loop leaves out.
"""

from __future__ import annotations

import functools
import importlib.resources
from typing import TYPE_CHECKING, Final

from .messages import Response

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from .messages import Request

__all__ = ["CONTENT_TYPES", "content_type", "load", "static_routes"]

CONTENT_TYPES: Final = {
    "html": b"text/html; charset=utf-8",
    "js": b"text/javascript; charset=utf-8",
    "css": b"text/css; charset=utf-8",
    "svg": b"image/svg+xml",
    "png": b"image/png",
}
"""By file extension; anything else is served as opaque bytes."""
DEFAULT_CONTENT_TYPE: Final = b"application/octet-stream"


def content_type(name: str) -> bytes:
    """The Content-Type for a file name, by its extension (case-insensitive)."""
    _, dot, extension = name.rpartition(".")
    return (
        CONTENT_TYPES.get(extension.lower(), DEFAULT_CONTENT_TYPE) if dot else DEFAULT_CONTENT_TYPE
    )


@functools.cache
def load(package: str, name: str) -> Response:
    """The answer for file ``name`` (``/``-separated, relative to ``package``): 200
    with its bytes, or 404 when the package has no such file. Read once per process."""
    resource = importlib.resources.files(package).joinpath(*name.split("/"))
    try:
        body = resource.read_bytes()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return Response.error(404, "NOT_FOUND")
    headers = (
        (b"Content-Type", content_type(name)),
        (b"Cache-Control", b"no-cache"),
        (b"X-Content-Type-Options", b"nosniff"),
    )
    return Response(200, body, headers)


def static_routes(
    package: str, files: Mapping[str, str]
) -> dict[str, dict[str, Callable[[Request], Awaitable[Response]]]]:
    """Routes (path -> method -> handler, as the HTTP APIs keep them) answering each
    path of ``files`` with its file of ``package`` on GET and HEAD."""
    routes: dict[str, dict[str, Callable[[Request], Awaitable[Response]]]] = {}
    for path, name in files.items():

        async def handler(request: Request, name: str = name) -> Response:
            return load(package, name)

        routes[path] = {"GET": handler, "HEAD": handler}
    return routes

"""http/static.py: package files answered with their type, 404 for a missing one, HEAD
through the connection loop; and the admin page's files themselves (shipped, linked by
absolute paths, nothing loaded from elsewhere)."""

from __future__ import annotations

import re

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from trionsq.http.connection import StreamTransport, serve_http_connection
from trionsq.http.messages import Request, Response
from trionsq.http.static import CONTENT_TYPES, content_type, load, static_routes
from trionsq.lookupd.http_api import ADMIN_PAGE as LOOKUPD_ADMIN_PAGE
from trionsq.server.nsqd_api import ADMIN_PAGE

PAGE_FILES = sorted(set(ADMIN_PAGE.values()))


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("index.html", b"text/html; charset=utf-8"),
        ("admin_page/admin.js", b"text/javascript; charset=utf-8"),
        ("a.b/admin.css", b"text/css; charset=utf-8"),
        ("logo.svg", b"image/svg+xml"),
        ("LOGO.PNG", b"image/png"),
        ("README", b"application/octet-stream"),
        ("archive.tar.gz", b"application/octet-stream"),
        ("html", b"application/octet-stream"),
    ],
)
def test_content_type_by_extension(name: str, expected: bytes) -> None:
    assert content_type(name) == expected


@given(st.text(alphabet=st.characters(blacklist_characters="."), max_size=20))
def test_content_type_ignores_the_stem_and_the_case(stem: str) -> None:
    for extension, expected in CONTENT_TYPES.items():
        assert content_type(f"{stem}.{extension}") == expected
        assert content_type(f"{stem}.{extension.upper()}") == expected


def test_a_file_is_answered_with_its_bytes_and_no_cache() -> None:
    response = load("trionsq", "admin_page/index.html")
    assert response.status == 200
    assert response.body.startswith(b"<!doctype html>")
    headers = dict(response.headers)
    assert headers[b"Content-Type"] == b"text/html; charset=utf-8"
    assert headers[b"Cache-Control"] == b"no-cache"
    assert load("trionsq", "admin_page/index.html") is response  # read once


def request(method: str, path: str) -> Request:
    return Request.from_target(method, path, {})


async def test_routes_answer_get_and_head_and_404_for_a_missing_file() -> None:
    routes = static_routes("trionsq", {"/page": "admin_page/admin.css", "/gone": "admin_page/no"})
    assert set(routes["/page"]) == {"GET", "HEAD"}
    css = await routes["/page"]["GET"](request("GET", "/page"))
    assert css.status == 200
    assert dict(css.headers)[b"Content-Type"] == b"text/css; charset=utf-8"
    assert await routes["/page"]["HEAD"](request("HEAD", "/page")) == css
    missing = await routes["/gone"]["GET"](request("GET", "/gone"))
    assert (missing.status, missing.body) == (404, b'{"message":"NOT_FOUND"}')
    folder = await static_routes("trionsq", {"/": "admin_page"})["/"]["GET"](request("GET", "/"))
    assert folder.status == 404


async def exchange(raw: bytes) -> bytes:
    """``raw`` through the HTTP connection loop serving the admin page's routes."""
    routes = static_routes("trionsq", ADMIN_PAGE)

    async def dispatch(request: Request) -> Response:
        methods = routes.get(request.path)
        if methods is None:
            return Response.error(404, "NOT_FOUND")
        return await methods[request.method](request)

    client, server = trio.testing.memory_stream_pair()
    await client.send_all(raw)
    await client.send_eof()
    with trio.fail_after(5):
        await serve_http_connection(StreamTransport(server), dispatch, lambda head, length: 0)
    await server.aclose()
    answer = b""
    while chunk := await client.receive_some():
        answer += chunk
    return answer


async def test_head_through_the_loop_has_the_headers_and_no_body() -> None:
    script = load("trionsq", "admin_page/admin.js").body
    get = await exchange(b"GET /admin/admin.js HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    head = await exchange(b"HEAD /admin/admin.js HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    get_head, _, get_body = get.partition(b"\r\n\r\n")
    head_head, _, head_body = head.partition(b"\r\n\r\n")
    assert get_body == script
    assert head_body == b""
    assert b"Content-Type: text/javascript; charset=utf-8" in head_head
    assert b"Content-Length: %d" % len(script) in head_head
    strip_date = re.compile(rb"Date: [^\r]*")
    assert strip_date.sub(b"", head_head) == strip_date.sub(b"", get_head)


def test_broker_and_lookupd_serve_the_same_page() -> None:
    assert LOOKUPD_ADMIN_PAGE == ADMIN_PAGE
    assert ADMIN_PAGE["/admin"] == ADMIN_PAGE["/admin/"] == "admin_page/index.html"


@pytest.mark.parametrize("name", PAGE_FILES)
def test_page_files_are_shipped(name: str) -> None:
    assert load("trionsq", name).status == 200


def test_the_page_loads_nothing_from_elsewhere() -> None:
    """No CDN, no web font: every link of the HTML is one of its own absolute paths,
    and neither the CSS nor the script names another origin."""
    html = load("trionsq", "admin_page/index.html").body.decode()
    links = re.findall(r'(?:src|href)="([^"]*)"', html)
    assert sorted(links) == ["/admin/admin.css", "/admin/admin.js", "data:,"]
    assert {path for path in links if path.startswith("/")} <= set(ADMIN_PAGE)
    css = load("trionsq", "admin_page/admin.css").body.decode()
    assert "url(" not in css
    assert "@import" not in css
    scripts = [path for path in ADMIN_PAGE.values() if path.endswith(".js")]
    for name in scripts:
        script = load("trionsq", name).body.decode()
        assert re.findall(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}", script) == []
        # the page's modules import only each other, from the page's own paths
        for imported in re.findall(r'^import .* from "([^"]*)";$', script, re.MULTILINE):
            assert f"admin_page/{imported.removeprefix('./')}" in scripts, (name, imported)
        assert "import(" not in script  # nothing loaded at run time

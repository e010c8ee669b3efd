"""The admin page's files (docs/admin.md) by the path they are answered at: a broker
serves them beside its admin stream, a lookupd the same page, which finds the brokers
through ``/nodes``. Both route them with :func:`trionsq.http.static.static_routes`.
"""

from __future__ import annotations

from typing import Final

__all__ = ["ADMIN_PAGE"]

ADMIN_PAGE: Final = {
    "/admin": "admin_page/index.html",
    "/admin/": "admin_page/index.html",
    "/admin/admin.js": "admin_page/admin.js",
    "/admin/admin_dom.js": "admin_page/admin_dom.js",
    "/admin/admin_views.js": "admin_page/admin_views.js",
    "/admin/admin_model.js": "admin_page/admin_model.js",
    "/admin/admin.css": "admin_page/admin.css",
}
"""Path -> the file of the ``trionsq`` package that answers it."""

"""The dashboard serves its tab icon instead of answering /favicon.ico with 404."""

from __future__ import annotations

from pathlib import Path

from tests.dashboard_helpers import dashboard_server


def test_favicon_is_served(tmp_path: Path) -> None:
    with dashboard_server(tmp_path) as srv:
        status, body = srv.get("/favicon.ico")
        _, index = srv.get("/")
    assert status == 200
    assert body.startswith(b"<svg") and body.rstrip().endswith(b"</svg>")
    assert b'rel="icon"' in index

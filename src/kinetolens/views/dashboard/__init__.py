"""The web dashboard (``kinetolens serve``): a small Starlette app over a logdir.

Starlette + uvicorn serve JSON endpoints and one static page; plotly.js is
served from the installed ``plotly`` package, so the dashboard works
offline.  See :mod:`.app` for the routes, :mod:`.state` for background
loading, :mod:`.sources` for the tables and :mod:`.pages` for the views.
"""

from kinetolens.views.dashboard.app import create_app

__all__ = ["create_app"]

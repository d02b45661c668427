"""The dashboard's HTTP server: a small Starlette app over a :class:`TraceStore`.

Every endpoint is a GET that answers JSON (or the static page and its
assets).  Handlers are plain functions, which Starlette runs in its thread
pool, so a slow table for one trace never holds up another request; loads
themselves run in the store's own pool and a request for a trace that is
not loaded yet answers ``202`` with the load's progress.  Errors answer one
line of JSON with a 4xx status (unknown run, a parameter the view refuses:
:class:`~.sources.BadParameter`) or, for a trace that cannot be loaded,
``{"state": "error"}`` with its :class:`TraceError`.  Anything else raised
while answering (a ``KeyError`` or ``ValueError`` inside an analysis
included) is the server's fault: logged with its traceback, answered 500
with one line; no traceback ever leaves the server.
"""

from __future__ import annotations

import contextlib
import html
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.datastructures import QueryParams
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from kinetolens import json_codec
from kinetolens.errors import TraceError
from kinetolens.logdir import newest_per_rank
from kinetolens.views.dashboard import compare, critical_path_page, pages
from kinetolens.views.dashboard.hosts import HostCheck
from kinetolens.views.dashboard.catalog import find_source, table
from kinetolens.views.dashboard.sources import BadParameter, Ctx
from kinetolens.views.dashboard.state import Loaded, TraceStore, UnknownTrace, file_key, worker_id
from kinetolens.views.dashboard.tables import page

STATIC = Path(__file__).with_name("static")
log = logging.getLogger("kinetolens.dashboard")


def json(payload: Any, status: int = 200) -> Response:
    return Response(json_codec.encode(payload), status_code=status, media_type="application/json",
                    headers={"Cache-Control": "no-store"})  # fmt: skip


def _answer(ctx: Ctx, what: tuple[str, str], query: QueryParams, body: Callable[[], bytes]) -> Response:
    """A view's or table's JSON, encoded once per trace and query.

    The key is the whole query (step, sort, search, page, range ...) and the
    ranks' files for a run view; a diff depends on a second trace, so its
    answers are not kept."""
    if ctx.other is not None:
        return Response(body(), media_type="application/json", headers={"Cache-Control": "no-store"})
    key = (*what, ctx.ranks_key, tuple(sorted(query.multi_items())))
    return Response(ctx.loaded.answer(key, body), media_type="application/json", headers={"Cache-Control": "no-store"})


class Pending(Exception):
    """The trace (or one of a run's traces) is still loading: answer 202 with its status."""

    def __init__(self, status: dict[str, Any]) -> None:
        super().__init__(status)  # args rebuild it when unpickled
        self.status = status


class Failed(Exception):
    """The trace cannot be loaded: answer its one-line error."""

    def __init__(self, error: str) -> None:
        super().__init__(error)  # args rebuild it when unpickled
        self.error = error


def _plotly_js() -> Path:
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


def _perfetto_export() -> Any | None:
    """``views.perfetto.chrome_trace`` (the annotated Chrome/Perfetto JSON) where that module exists."""
    try:
        from kinetolens.views import perfetto  # type: ignore[attr-defined]
    except ImportError:
        return None
    for name in ("chrome_trace",):
        fn = getattr(perfetto, name, None)
        if callable(fn):
            return fn
    return None


def _note_svg(message: str) -> str:
    """A picture that says why there is no picture (an <img> shows it where a JSON error would break)."""
    return ('<svg xmlns="http://www.w3.org/2000/svg" width="640" height="40" font-family="sans-serif" '
            f'font-size="13"><text x="8" y="24">{html.escape(message)}</text></svg>')  # fmt: skip


class Dashboard:
    """Routes bound to one store."""

    def __init__(self, store: TraceStore) -> None:
        self.store = store

    # -- helpers -------------------------------------------------------
    def _loaded(self, run: str, worker: str) -> Loaded:
        w = self.store.lookup(run, worker)
        loaded = self.store.get(w)
        if loaded is not None:
            return loaded
        status = self.store.status(w)
        if status["state"] == "error":
            raise Failed(status["error"])
        raise Pending(status)

    def _ctx(self, request: Request) -> Ctx:
        q = request.query_params
        step_text = q.get("step") or ""
        try:
            step = int(step_text) if step_text else None
        except ValueError:
            raise BadParameter(f"step must be a step number, not {step_text!r}") from None
        w = self.store.lookup(q.get("run", ""), q.get("worker", ""))
        loaded = self.store.get(w)  # its load queued with the ranks', not one poll after them
        ranks, ranks_key, waiting = None, (), []
        if q.get("ranks") == "all":
            ranks, ranks_key, waiting = self._digests(q.get("run", ""))
        if loaded is None:
            status = self.store.status(w)
            if status["state"] == "error":
                raise Failed(status["error"])
            if not waiting:
                raise Pending(status)
            if worker_id(w) not in waiting:
                waiting.insert(0, worker_id(w))
        if waiting:
            raise Pending({"state": "loading", "waiting_for": waiting, "loaded": len(ranks or [])})
        if step is not None and step not in loaded.memo("step_numbers", lambda: set(loaded.trace.steps["step"].to_list())):
            # every view and table alike: empty tables for a step the trace lacks would read as "nothing ran"
            raise BadParameter(f"no step {step} in this trace")
        other = None
        if q.get("other_run") and q.get("other_worker"):
            other = self._loaded(q["other_run"], q["other_worker"])
        return Ctx(loaded, step, q, other=other, ranks=ranks, ranks_key=ranks_key)

    def _digests(self, run: str) -> tuple[list[Any], tuple[Any, ...], list[str]]:
        """Every rank's digest, the files they stand for, and the ranks still loading.

        Digests are kept per file, whole traces only in the small LRU, so
        the view finishes however many ranks the run has."""
        digests, keys, waiting = [], [], []
        for i, w in enumerate(newest_per_rank(self.store.run_workers(run))[0]):  # one trace per rank, as `dist`
            got = self.store.digest(w, w.rank if w.rank is not None else i)
            if got is not None:
                digests.append(got)
                keys.append(file_key(w.path))
            elif self.store.status(w)["state"] != "error":  # a broken rank is shown in the left panel
                waiting.append(worker_id(w))
        return digests, tuple(keys), waiting

    def _guard(self, fn: Any, request: Request) -> Response:
        try:
            return fn(request)
        except (UnknownTrace, TraceError) as exc:  # TraceError: the logdir itself is gone
            return json({"error": str(exc)}, 404)
        except Pending as exc:
            return json(exc.status, 202)
        except Failed as exc:
            return json({"state": "error", "error": exc.error}, 200)
        except BadParameter as exc:
            return json({"error": " ".join(str(exc).split())}, 400)
        except Exception as exc:
            log.exception("dashboard request %s failed", request.url.path)
            return json({"error": f"internal error: {type(exc).__name__}: {' '.join(str(exc).split())}"}, 500)

    # -- endpoints -----------------------------------------------------
    def index(self, request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    def plotly(self, request: Request) -> Response:
        return FileResponse(_plotly_js(), media_type="application/javascript")

    def runs(self, request: Request) -> Response:
        def go(r: Request) -> Response:
            out = []
            for run, traces in self.store.runs().items():
                workers = [
                    {"id": worker_id(w), "worker": w.worker, "span": w.span, "rank": w.rank, **self.store.status(w)}
                    for w in traces
                ]
                out.append({"run": run, "workers": workers})
            return json({"logdir": str(self.store.logdir), "runs": out, "perfetto": _perfetto_export() is not None})

        return self._guard(go, request)

    def status(self, request: Request) -> Response:
        def go(r: Request) -> Response:
            q = r.query_params
            w = self.store.lookup(q.get("run", ""), q.get("worker", ""))
            loaded = self.store.get(w) if q.get("load") == "1" else None
            return json({"state": "ready"} if loaded is not None else self.store.status(w))

        return self._guard(go, request)

    def view(self, request: Request) -> Response:
        def go(r: Request) -> Response:
            name = r.path_params["view"]
            builders = {**pages.VIEWS, "distributed": compare.distributed, "diff": compare.diff_view,
                        critical_path_page.VIEW: critical_path_page.view}
            if name not in builders:
                return json({"error": f"no view {name!r}"}, 404)
            ctx = self._ctx(r)

            def body() -> bytes:
                steps = [int(s) for s in ctx.trace.steps["step"].to_list()]
                return json_codec.encode({"state": "ready", "view": name, "steps": steps, "blocks": builders[name](ctx)})

            return _answer(ctx, ("view", name), r.query_params, body)

        return self._guard(go, request)

    def table(self, request: Request) -> Response:
        def go(r: Request) -> Response:
            name = r.path_params["source"]
            if find_source(name) is None:
                return json({"error": f"no table {name!r}"}, 404)
            ctx = self._ctx(r)
            q = r.query_params

            def body() -> bytes:
                return json_codec.encode(page(
                    table(ctx, name), sort=q.get("sort") or None,
                    descending=q.get("desc", "1") != "0", search=q.get("q", ""),
                    offset=ctx.whole("offset", 0), limit=ctx.whole("limit", 50),
                    full_names=q.get("full_names", "") == "1",
                ))  # fmt: skip

            return _answer(ctx, ("table", name), q, body)

        return self._guard(go, request)

    def memory_flow(self, request: Request) -> Response:
        def go(r: Request) -> Response:
            from kinetolens.analysis.memory.usage import memory_peaks
            from kinetolens.analysis.memory.allocations import allocations
            from kinetolens.views.dashboard.sources import memory_window
            from kinetolens.views.memory_flow_svg import render_memory_flow

            ctx = self._ctx(r)

            def svg() -> str:
                events, _ = memory_window(ctx)
                if events.height == 0:  # a range dragged past the last event, or a trace without memory records
                    return _note_svg("No memory events in this range.")
                label = str(memory_peaks(events)["device"][0])
                mine = events.filter(events["device"] == label)
                window = (int(mine["ts"].min()), int(mine["ts"].max()))  # type: ignore[arg-type]
                allocs = allocations(mine)
                return render_memory_flow(allocs, window=window, title=f"memory flow, {label}")

            key = ("memory_flow", r.query_params.get("device", ""), r.query_params.get("start_ms", ""),
                   r.query_params.get("end_ms", ""))  # fmt: skip
            return Response(ctx.memo(key, svg), media_type="image/svg+xml")

        return self._guard(go, request)

    def perfetto(self, request: Request) -> Response:
        def go(r: Request) -> Response:
            export = _perfetto_export()
            if export is None:
                return json({"error": "Perfetto export is not available in this installation"}, 404)
            ctx = self._ctx(r)
            data = export(ctx.trace)
            body = data if isinstance(data, (bytes, str)) else json_codec.encode(data)
            name = Path(ctx.trace.path).name.split(".json")[0] + ".perfetto.json"
            return Response(body, media_type="application/json",
                            headers={"Content-Disposition": f'attachment; filename="{name}"'})  # fmt: skip

        return self._guard(go, request)


#: The tab icon: a small bar chart (browsers ask for /favicon.ico whatever the page says).
FAVICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><rect width="16" height="16" rx="3" fill="#1f4e79"/>'
    '<rect x="3" y="8" width="2" height="5" fill="#fff"/><rect x="7" y="4" width="2" height="9" fill="#fff"/>'
    '<rect x="11" y="6" width="2" height="7" fill="#fff"/></svg>'
)


def favicon(request: Request) -> Response:
    return Response(FAVICON, media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})


def create_app(logdir: str | Path, *, cache: bool = True, keep: int = 6, host: str = "127.0.0.1") -> Starlette:
    """The dashboard app over ``logdir`` (its runs are listed again on each runs request).

    ``host``: the address it is served on; requests naming another host
    than that or a loopback name are refused (:mod:`.hosts`)."""
    store = TraceStore(logdir, cache=cache, keep=keep, digest=compare.rank_digest)
    d = Dashboard(store)
    routes = [
        Route("/", d.index),
        Route("/plotly.min.js", d.plotly),
        Route("/favicon.ico", favicon),
        Route("/api/runs", d.runs),
        Route("/api/status", d.status),
        Route("/api/view/{view}", d.view),
        Route("/api/table/{source}", d.table),
        Route("/api/memory_flow.svg", d.memory_flow),
        Route("/api/export/perfetto", d.perfetto),
        Mount("/static", app=StaticFiles(directory=STATIC), name="static"),
    ]
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        store.close()

    app = Starlette(routes=routes, lifespan=lifespan, middleware=[Middleware(HostCheck, bound=host)])
    app.state.store = store
    return app

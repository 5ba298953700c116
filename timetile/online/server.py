"""The HTTP service: a Join's features for many rows per request (DESIGN §5).

``create_app`` builds a FastAPI app over a store and some Joins; serve it with any ASGI
server (``timetile serve`` runs uvicorn). Routes:

- ``POST /v1/features/{join}`` with ``{"rows": [{"user_id": 1, ...}, ...], "at": EPOCH_MS}``
  (``at`` optional: now) answers ``{"request_id", "at", "results": [{"features", "stale"}]}``,
  one result per row, in row order. Strict JSON: non-finite floats are the strings ``"NaN"``,
  ``"Infinity"`` and ``"-Infinity"``; maps are objects with string keys; lists are arrays
  (:mod:`timetile.online.jsonable`). An ``X-Request-ID`` header becomes the request id.
- ``GET /health``: 200 with each Join's readiness and the response log's counters, or 503
  when the store does not answer.
- ``GET /docs``: the OpenAPI documentation, with example bodies.

Every error is ``{"error", "field", "fix"}``: 404 for an unknown Join (the fix lists the
served ones), 422 for a malformed body or a row without a key column or with a badly typed
key (naming ``rows[i]``) or a feature its op refuses (an integer ``sum`` past int64, as the
backfill refuses it), 503 when the store cannot be reached (naming it) or a Join's
GroupBys were never uploaded (fix: run ``timetile upload``).

Fetches run in FastAPI's threadpool (the route is a plain ``def``), so the event loop never
waits on the store. Each Join's :class:`Fetcher` is built at startup; a Join whose GroupBys
were never uploaded is retried on its next request or health check, so the service picks up
a first upload without a restart, and every ``refresh_seconds`` a fetcher re-reads the upload
metadata to pick up the next day's upload.
"""

# No `from __future__ import annotations`: FastAPI reads the route signatures at runtime,
# and they name a local (the per-Join examples).
import contextlib
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Body, FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from timetile import __version__
from timetile.api.errors import DefinitionError
from timetile.api.join import Join
from timetile.core.aggregators.base import ResultOverflowError
from timetile.core.timeutil import DAY_MS
from timetile.online.fetcher import Fetcher, NotUploadedError
from timetile.online.jsonable import to_json_value
from timetile.online.response_log import ResponseLog
from timetile.online.server_models import (
    EXAMPLE_AT,
    ApiError,
    ErrorBody,
    FetchRequest,
    FetchResponse,
    Health,
    JoinHealth,
    LogHealth,
)
from timetile.store.kv import KVStore, StoreUnavailable, open_store
from timetile.store.layout import META_TABLE, GroupByMeta

#: The fix of a Join that has no upload.
UPLOAD_FIX = ("run timetile upload DEFS.py --ds YYYY-MM-DD --store STORE for this Join, then "
              "retry: the service picks the upload up without a restart")
_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": description} for code, description in [
        (404, "No Join of that name is served."),
        (422, "A malformed body, a row without a key column, or a badly typed key; or a "
              "feature whose value its op refuses (an integer sum past int64), named."),
        (503, "The store cannot be reached, or the Join's GroupBys were never uploaded."),
    ]
}


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class _ServedJoin:
    """One Join and its Fetcher, built when its GroupBys have been uploaded. Thread-safe."""

    def __init__(self, join: Join, store: KVStore, refresh_seconds: float) -> None:
        self.join = join
        self.store = store
        self.refresh_seconds = refresh_seconds
        self._fetcher: Fetcher | None = None
        self._refreshed = 0.0
        self._lock = threading.Lock()

    def fetcher(self) -> Fetcher:
        """Return the Fetcher, building or refreshing it when due.

        Raises:
            NotUploadedError: a GroupBy of the Join has no upload yet.
            StoreUnavailable: the store cannot be reached.

        """
        fetcher = self._fetcher
        if fetcher is None:
            with self._lock:
                if self._fetcher is None:
                    self._fetcher = Fetcher(self.join, self.store)
                    self._refreshed = time.monotonic()
                return self._fetcher
        due = time.monotonic() - self._refreshed >= self.refresh_seconds
        if due and self._lock.acquire(blocking=False):  # one thread refreshes, others go on
            try:
                fetcher.refresh()
                self._refreshed = time.monotonic()
            except NotUploadedError:
                self._fetcher = None
                raise
            finally:
                self._lock.release()
        return fetcher

    def try_fetcher(self) -> None:
        """Build the Fetcher now if the store holds the uploads; else leave it for later."""
        with contextlib.suppress(NotUploadedError, StoreUnavailable):
            self.fetcher()

    def health(self) -> JoinHealth:
        """Say whether the Join can be served, and the day each GroupBy was uploaded through."""
        try:
            fetcher = self.fetcher()
        except NotUploadedError as error:
            return JoinHealth(ready=False, error=_first_sentence(error), fix=UPLOAD_FIX)
        names = list(dict.fromkeys(part.group_by.name for part in self.join.join_parts))
        uploaded = {}
        for name, data in zip(names, self.store.multi_get(META_TABLE, [n.encode() for n in names]),
                              strict=True):
            if data is None:
                continue
            try:
                day = GroupByMeta.from_bytes(data).day_end - DAY_MS
            except ValueError as error:  # what the next refresh of the fetcher will find
                return JoinHealth(ready=False, error=f"GroupBy {name}: {error}", fix=UPLOAD_FIX)
            uploaded[name] = time.strftime("%Y-%m-%d", time.gmtime(day // 1000))
        return JoinHealth(ready=True, key_columns=fetcher.key_columns, uploaded=uploaded)


def _is_json(media_type: str) -> bool:
    """Whether FastAPI reads a body of this media type as JSON (``application/json``, ``+json``)."""
    return media_type == "application/json" or (media_type.startswith("application/")
                                                 and media_type.endswith("+json"))


def _first_sentence(error: Exception) -> str:
    """Return an error's message without its own "Fix: ..." part."""
    return str(error).partition(". Fix:")[0].rstrip(".")


class _Service:
    """What the routes call: the served Joins, the store and the response log."""

    def __init__(self, joins: Mapping[str, Join], store: KVStore | str, log_dir: str | None,
                 refresh_seconds: float) -> None:
        self.owns_store = isinstance(store, str)
        self.store = open_store(store) if isinstance(store, str) else store
        self.label = repr(self.store)
        self.joins = {name: _ServedJoin(join, self.store, refresh_seconds)
                      for name, join in joins.items()}
        try:
            for entry in self.joins.values():
                entry.try_fetcher()
            self.response_log = ResponseLog(log_dir) if log_dir is not None else None
        except BaseException:
            if self.owns_store:
                self.store.close()
            raise

    def close(self) -> None:
        """Flush the response log and close the store if the service opened it."""
        if self.response_log is not None:
            self.response_log.close()
        if self.owns_store:
            self.store.close()

    def served(self, name: str) -> _ServedJoin:
        """Return the Join served as ``name``; raise a 404 :class:`ApiError` when none is."""
        entry = self.joins.get(name)
        if entry is None:
            raise ApiError(404, f"no Join named {name!r} is served", "join",
                           f"use one of {', '.join(self.joins) or 'none'}: "
                           "POST /v1/features/NAME")
        return entry

    def fetch(self, name: str, body: FetchRequest, request_id: str) -> dict[str, Any]:
        """Fetch, log and encode one request (see the module docstring for the errors)."""
        try:
            fetcher = self.served(name).fetcher()
        except NotUploadedError as error:
            raise ApiError(503, f"Join {name!r} is not ready: {_first_sentence(error)}", "join",
                           UPLOAD_FIX) from None
        at = body.at if body.at is not None else _now_ms()
        try:
            results = fetcher.fetch(body.rows, at)
        except DefinitionError as error:
            problem = error.problems[0]
            raise ApiError(422, f"{problem.field}: {problem.message}", problem.field,
                           problem.fix) from None
        except ResultOverflowError as error:  # the backfill refuses the same window
            message, _, fix = str(error).partition(". Fix: ")
            raise ApiError(422, message, "rows", fix) from None
        except ValueError as error:  # a record of another version: the upload is out of date
            raise ApiError(503, f"Join {name!r} cannot read its store: {error}", "join",
                           UPLOAD_FIX) from None
        for result in results:  # a GroupBy joined twice (a prefixed part) is stale once
            result.stale = list(dict.fromkeys(result.stale))
        if self.response_log is not None:
            keys = fetcher.key_columns
            self.response_log.log(request_id, fetcher.join.name, at,
                                  [{key: row[key] for key in keys} for row in body.rows], results)
        return {"request_id": request_id, "at": at,
                "results": [{"features": to_json_value(result.features), "stale": result.stale}
                            for result in results]}

    def health(self) -> Health:
        """Say whether the store answers, each Join is ready, and what the log did."""
        log = self.response_log
        counters = LogHealth(enabled=log is not None, written=log.written if log else 0,
                             dropped=log.dropped if log else 0)
        try:
            self.store.ping()
            joins = {name: entry.health() for name, entry in self.joins.items()}
        except StoreUnavailable as error:
            down = {name: JoinHealth(ready=False, error="the store cannot be reached")
                    for name in self.joins}
            return Health(status="unavailable", store=self.label, joins=down, log=counters,
                          error=self.store_error(error).error, fix=_STORE_FIX)
        return Health(status="ok", store=self.label, joins=joins, log=counters)

    def store_error(self, error: StoreUnavailable) -> ErrorBody:
        """Describe an unreachable store."""
        return ErrorBody(error=f"the store {self.label} cannot be reached: {error}",
                         field="store", fix=_STORE_FIX)

    def examples(self) -> dict[str, Any]:
        """Return an example request body per Join, for the OpenAPI docs."""
        return {name: {"summary": f"two rows of {name}",
                       "value": _example(entry.join, rows=2)}
                for name, entry in self.joins.items()}


def create_app(joins: Mapping[str, Join], store: KVStore | str, *, log_dir: str | None = None,
               refresh_seconds: float = 60.0) -> FastAPI:
    """Build the service for ``joins`` (by name) over ``store``.

    Args:
        joins: the Joins to serve, by the name in the URL (normally each Join's own name).
        store: an open store (the caller closes it), or a URI for
            :func:`~timetile.store.kv.open_store` (the app closes it at shutdown).
        log_dir: when given, every response is logged there
            (:class:`~timetile.online.response_log.ResponseLog`); flushed at shutdown.
        refresh_seconds: how often each fetcher re-reads the upload metadata.

    The app's state holds ``store``, ``response_log`` (None without ``log_dir``) and
    ``health``, a function returning what ``GET /health`` answers, as a :class:`Health`.

    Raises:
        ValueError: ``store`` is a URI of no known store.
        StoreUnavailable: ``store`` is a URI and the store cannot be reached.

    """
    service = _Service(joins, store, log_dir, refresh_seconds)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            service.close()

    app = FastAPI(title="timetile features", version=__version__, lifespan=lifespan,
                  description="Point-in-time-correct features of timetile Joins, online. "
                              'Non-finite floats are the strings "NaN", "Infinity" and '
                              '"-Infinity"; maps are JSON objects; lists are arrays.')
    app.state.store = service.store
    app.state.response_log = service.response_log
    app.state.health = service.health
    _add_error_handlers(app, service)
    examples = service.examples()

    @app.post("/v1/features/{join}", response_model=FetchResponse, responses=_ERRORS,
              summary="Fetch a Join's features for many rows")
    def features(
        join: str,
        body: Annotated[FetchRequest, Body(openapi_examples=examples)],
        x_request_id: Annotated[str | None, Header()] = None,
    ) -> JSONResponse:
        """Return the features of every row at `at` (epoch ms, default now), in row order."""
        return JSONResponse(service.fetch(join, body, x_request_id or uuid.uuid4().hex))

    @app.get("/health", response_model=Health, responses={503: {"model": Health}},
             summary="Whether the store answers and each Join is ready")
    def health() -> JSONResponse:
        """200 when the store answers (each Join says whether it is ready), else 503."""
        body = service.health()
        return JSONResponse(body.model_dump(exclude_none=True),
                            status_code=200 if body.status == "ok" else 503)

    return app


_STORE_FIX = ("check that the store is running and reachable from the service (for Redis: "
              "redis-cli -u URL ping; for LMDB: that the directory exists and is readable), "
              "then retry; GET /health shows when it answers again")


def _example(join: Join, rows: int) -> dict[str, Any]:
    """Return a request body for ``join`` with ``rows`` rows."""
    keys = list(dict.fromkeys(key for part in join.join_parts for key in part.left_keys))
    return {"rows": [dict.fromkeys(keys, index + 1) for index in range(rows)], "at": EXAMPLE_AT}


def _example_body(service: _Service) -> dict[str, Any]:
    """Return a request body for the first served Join (any, when none is served)."""
    served = next(iter(service.joins.values()), None)
    return _example(served.join, rows=1) if served is not None else {"rows": [{"user_id": 1}]}


def _add_error_handlers(app: FastAPI, service: _Service) -> None:
    """Answer every error as an :class:`ErrorBody`."""

    async def api_error(_: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, ApiError)
        return JSONResponse(error.body.model_dump(), status_code=error.status)

    async def store_down(_: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, StoreUnavailable)
        return JSONResponse(service.store_error(error).model_dump(), status_code=503)

    async def invalid(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, RequestValidationError)
        name = request.path_params.get("join")
        try:  # a wrong URL first, then the body
            join = service.served(name).join if name is not None else None
        except ApiError as unknown:
            return await api_error(request, unknown)
        problems = [_problem(problem) for problem in error.errors()]
        field, message = problems[0] if problems else ("body", "is not valid")
        example = _example(join, rows=1) if join is not None else {"rows": [{"user_id": 1}]}
        fix = (f"send a JSON object like {json.dumps(example)} (rows: one object per row "
               "with the key columns; at: epoch milliseconds, optional); see /docs")
        media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
        if field == "body" and not _is_json(media_type):  # FastAPI read no JSON at all
            field, message = "Content-Type", (f"is {media_type!r}, so the body was not read as "
                                              "JSON" if media_type else "is missing, so the "
                                              "body was not read as JSON")
            fix = f"send the header Content-Type: application/json; {fix}"
            problems.insert(0, (field, message))
        content = ErrorBody(error=f"{field}: {message}", field=field, fix=fix).model_dump()
        content["problems"] = [{"field": f, "error": m} for f, m in problems]
        return JSONResponse(content, status_code=422)

    async def http_error(request: Request, error: Exception) -> JSONResponse:
        """FastAPI's own refusals (no such path, a wrong method, an unparsable body)."""
        assert isinstance(error, StarletteHTTPException)
        field, fix = {
            404: ("path", "POST /v1/features/{join} or GET /health; see /docs"),
            405: ("method", f"use the method /docs gives for {request.url.path}"),
        }.get(error.status_code, ("body", "send a JSON object such as "
                                          f"{json.dumps(_example_body(service))}; see /docs"))
        body = ErrorBody(error=f"{request.method} {request.url.path}: {error.detail}",
                         field=field, fix=fix)
        return JSONResponse(body.model_dump(), status_code=error.status_code,
                            headers=getattr(error, "headers", None))

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(StoreUnavailable, store_down)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(StarletteHTTPException, http_error)


def _problem(problem: Mapping[str, Any]) -> tuple[str, str]:
    """Return (field, message) of one pydantic error, the field as ``rows[0].user_id``."""
    if problem.get("type") == "json_invalid":
        detail = problem.get("ctx", {}).get("error", "")
        return "body", f"is not valid JSON ({detail})" if detail else "is not valid JSON"
    field = ""
    for part in list(problem.get("loc", ()))[1:]:  # the first is "body"
        field += f"[{part}]" if isinstance(part, int) else f".{part}" if field else str(part)
    message = str(problem.get("msg", "is not valid"))
    return field or "body", message[0].lower() + message[1:] if message else message

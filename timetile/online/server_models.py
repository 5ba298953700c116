"""The bodies of the HTTP service (:mod:`timetile.online.server`), as pydantic models.

They define the OpenAPI schema shown at ``/docs``, with examples. Responses are encoded by
:mod:`timetile.online.jsonable`: non-finite floats as the strings ``"NaN"``, ``"Infinity"``,
``"-Infinity"``; maps (histograms, buckets) as JSON objects with string keys; lists as arrays.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt

#: The most rows one request may carry.
MAX_ROWS = 10_000
#: What the examples call the fetch time: 2024-03-01T12:00:00Z.
EXAMPLE_AT = 1_709_294_400_000


class FetchRequest(BaseModel):
    """``POST /v1/features/{join}``: the rows to fetch, and when."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"rows": [{"user_id": 1, "seller_id": 3}, {"user_id": 2, "seller_id": 3}],
         "at": EXAMPLE_AT},
    ]})

    rows: list[dict[str, Any]] = Field(
        max_length=MAX_ROWS,
        description="One object per row, holding the Join's key columns (more columns are "
                    f"ignored). At most {MAX_ROWS:,} rows; results come back in this order.")
    at: StrictInt | None = Field(
        default=None,
        description="The fetch time, epoch milliseconds (UTC); now when left out. Features "
                    "count the events strictly before it, as the backfill does.")


class RowResult(BaseModel):
    """One row's features."""

    features: dict[str, Any] = Field(
        description="Output column → value, named as `timetile backfill` names them. "
                    'Non-finite floats are the strings "NaN", "Infinity", "-Infinity".')
    stale: list[str] = Field(
        description="The GroupBys whose last upload no longer covers `at` (the next upload "
                    "is late): their values may miss corrections.")


class FetchResponse(BaseModel):
    """The answer to ``POST /v1/features/{join}``: one result per requested row, in order."""

    model_config = ConfigDict(json_schema_extra={"examples": [{
        "request_id": "4f1c2a9e0d7b4c55a3e6b8f1d2c3a4b5",
        "at": EXAMPLE_AT,
        "results": [{"features": {"user_views_duration_sum_1d": 431.5,
                                  "user_views_duration_avg_1h": "NaN",
                                  "user_views_listing_id_last_k_30d": [17, 4]},
                     "stale": []}],
    }]})

    request_id: str = Field(description="The X-Request-ID header when sent, else a new id; "
                                        "the response log records it.")
    at: int = Field(description="The fetch time used, epoch milliseconds.")
    results: list[RowResult]


class ErrorBody(BaseModel):
    """Every error: what is wrong, where, and what to do about it."""

    model_config = ConfigDict(json_schema_extra={"examples": [{
        "error": "rows[1]: lacks the key column user_id",
        "field": "rows[1]",
        "fix": "give every row the key columns user_id, seller_id",
    }]})

    error: str
    field: str
    fix: str


class JoinHealth(BaseModel):
    """One served Join in ``GET /health``."""

    ready: bool
    key_columns: list[str] = Field(default_factory=list)
    uploaded: dict[str, str] = Field(
        default_factory=dict,
        description="GroupBy → the day its last upload holds the events through (UTC).")
    error: str | None = None
    fix: str | None = None


class LogHealth(BaseModel):
    """The response log's counters, in rows (0 when no log is kept)."""

    enabled: bool
    written: int
    dropped: int


class Health(BaseModel):
    """``GET /health``: 200 when the store answers, 503 when it does not."""

    status: str = Field(description='"ok", or "unavailable" when the store cannot be reached.')
    store: str
    joins: dict[str, JoinHealth]
    log: LogHealth
    error: str | None = None
    fix: str | None = None


class ApiError(Exception):
    """An error the service answers with ``status`` and an :class:`ErrorBody`."""

    def __init__(self, status: int, error: str, field: str, fix: str) -> None:
        super().__init__(error)
        self.status = status
        self.body = ErrorBody(error=error, field=field, fix=fix)

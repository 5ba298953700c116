"""The HTTP service over a real store: LMDB filled as ``upload`` fills it, then FastAPI's
TestClient; one test stops a real redis-server under a running app.

The data are small enough to check by hand: at ``AT`` (an hour after the upload's day end),
``users_amount_sum_1d`` sums the amounts in ``[AT − 1d, AT)``. The stores are filled without
Spark (:mod:`timetile.testing.hand_upload`), so only one test here starts Spark: the one
that checks that ``upload`` on Spark serves exactly what the hand upload serves.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient

import timetile as tt
from timetile.core.timeutil import DAY_MS, HOUR_MS, date_to_ms
from timetile.offline.upload import upload
from timetile.online.fetcher import Fetcher
from timetile.online.jsonable import to_json_value
from timetile.online.server import create_app
from timetile.store.kv import open_store
from timetile.store.layout import META_TABLE, served_definition
from timetile.store.lmdb_store import LmdbStore
from timetile.store.tiles import put_events, read_meta
from timetile.testing import RedisServer
from timetile.testing.hand_upload import upload_key

DS = "2024-01-02"
DAY_END = date_to_ms(DS) + DAY_MS
AT = DAY_END + HOUR_MS
JAN_1 = date_to_ms("2024-01-01")
INF = float("inf")
NAN = float("nan")

#: (user_id, item, amount, ts): uploaded (before DAY_END) and one streamed after it.
EVENTS = [
    (1, 10, 1.0, JAN_1 + 8 * HOUR_MS),
    (1, 10, 5.0, JAN_1 + DAY_MS + 10 * HOUR_MS),
    (1, 11, 7.0, JAN_1 + DAY_MS + 12 * HOUR_MS),
    (2, 20, 3.0, JAN_1 + DAY_MS + 1 * HOUR_MS),  # exactly at AT − 1d: counts
    (3, 30, NAN, JAN_1 + DAY_MS + 5 * HOUR_MS),
    (4, 40, INF, JAN_1 + DAY_MS + 6 * HOUR_MS),
    (5, 50, -INF, JAN_1 + DAY_MS + 7 * HOUR_MS),
]
STREAMED = (1, 12, 100.0, DAY_END + 30 * 60_000)
SCHEMA = "user_id long, item long, amount double, ts long"


def definitions(views: str, checkouts: str) -> tuple[tt.Join, tt.Join]:
    users = tt.GroupBy("users", tt.EventSource(views, time_column="ts"), ["user_id"], [
        tt.Aggregation("amount", "sum", windows=["1d"]),
        tt.Aggregation("amount", "max"),
        tt.Aggregation("amount", "count"),
        tt.Aggregation("item", "histogram", windows=["7d"]),
        tt.Aggregation("item", "last_k", k=2, windows=["7d"]),
    ])
    never = tt.GroupBy("never_uploaded", tt.EventSource(views, time_column="ts"), ["user_id"],
                       [tt.Aggregation("amount", "count")])
    left = tt.EventSource(checkouts, time_column="ts")
    model = tt.Join("model", left, [users, tt.JoinPart(users, prefix="seller",
                                                       key_mapping={"seller_id": "user_id"})])
    return model, tt.Join("pending", left, [never])


def upload_by_hand(uri: str, group_by: tt.GroupBy, ds: str) -> None:
    """Write what ``upload(group_by, spark, ds, uri)`` writes of ``EVENTS``, without Spark.

    ``test_the_hand_upload_serves_what_the_upload_on_spark_serves`` holds the two equal.
    """
    day_end = date_to_ms(ds) + DAY_MS
    by_key: dict[int, list[tuple[int, int, float, int]]] = {}
    for event in sorted(EVENTS, key=lambda event: event[3]):
        if event[3] < day_end:
            by_key.setdefault(event[0], []).append(event)
    with open_store(uri) as store:
        for user, events in by_key.items():
            times = np.array([event[3] for event in events], dtype=np.int64)
            columns = {"item": (np.array([event[1] for event in events], dtype=np.int64), times),
                       "amount": (np.array([event[2] for event in events]), times)}
            upload_key(store, group_by, day_end, columns, key=(user,),
                       value_types={"item": "int", "amount": "float"})


def stream_one_event(uri: str, group_by: tt.GroupBy) -> None:
    streamed = pa.table({name: [value] for name, value in
                         zip(["user_id", "item", "amount", "ts"], STREAMED, strict=True)})
    with open_store(uri) as store:
        put_events(store, group_by, streamed, "b1")


def write_sources(root: Path) -> tuple[str, str]:
    """Write the events and the left rows as Parquet; return their paths."""
    views, checkouts = root / "views", root / "checkouts"
    views.mkdir()
    checkouts.mkdir()
    columns = list(zip(*EVENTS, strict=True))
    pq.write_table(pa.table([pa.array(columns[0], pa.int64()), pa.array(columns[1], pa.int64()),
                             pa.array(columns[2], pa.float64()), pa.array(columns[3], pa.int64())],
                            names=["user_id", "item", "amount", "ts"]), views / "part-0.parquet")
    pq.write_table(pa.table({"user_id": pa.array([1], pa.int64()),
                             "seller_id": pa.array([2], pa.int64()),
                             "ts": pa.array([AT], pa.int64())}), checkouts / "part-0.parquet")
    return str(views), str(checkouts)


@pytest.fixture(scope="module")
def uploaded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Upload ``users`` into a fresh LMDB store, then stream one more event of user 1."""
    root = tmp_path_factory.mktemp("server")
    model, pending = definitions(*write_sources(root))
    uri = f"lmdb://{root / 'store'}"
    upload_by_hand(uri, model.join_parts[0].group_by, DS)
    stream_one_event(uri, model.join_parts[0].group_by)
    return {"uri": uri, "model": model, "pending": pending, "root": root}


def test_the_hand_upload_serves_what_the_upload_on_spark_serves(
        spark: Any, uploaded: dict[str, Any], tmp_path: Path) -> None:
    """The other tests' stores are filled by hand: ``upload`` on Spark, from the same
    Parquet, writes the same metadata (but its generation) and serves the same features to
    every key, at the upload's day end, the stream's event and an hour later."""
    model = uploaded["model"]
    users = model.join_parts[0].group_by
    uri = f"lmdb://{tmp_path / 'store'}"
    upload(model, spark, DS, uri)
    stream_one_event(uri, users)
    rows = [{"user_id": user, "seller_id": (user + 1) % 7} for user in range(7)]
    with open_store(uri) as on_spark, open_store(uploaded["uri"]) as by_hand:
        assert replace(read_meta(on_spark, users), generation=0) == read_meta(by_hand, users)
        for at in (DAY_END, STREAMED[3], STREAMED[3] + 1, AT):
            theirs = Fetcher(model, on_spark).fetch(rows, at=at)
            ours = Fetcher(model, by_hand).fetch(rows, at=at)
            assert [result.stale for result in ours] == [result.stale for result in theirs]
            assert [to_json_value(result.features) for result in ours] == [
                to_json_value(result.features) for result in theirs], at


@pytest.fixture
def client(uploaded: dict[str, Any]) -> Iterator[TestClient]:
    app = create_app({"model": uploaded["model"], "pending": uploaded["pending"]},
                     uploaded["uri"])
    with TestClient(app) as test_client:
        yield test_client


def post(client: TestClient, rows: list[dict[str, Any]], at: int | None = AT,
         join: str = "model") -> Any:
    body: dict[str, Any] = {"rows": rows}
    if at is not None:
        body["at"] = at
    return client.post(f"/v1/features/{join}", json=body)


def test_features_of_one_row(client: TestClient) -> None:
    response = post(client, [{"user_id": 1, "seller_id": 2}])
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["at"] == AT
    assert len(body["request_id"]) == 32
    [result] = body["results"]
    assert result["stale"] == []
    assert result["features"] == {
        "users_amount_sum_1d": 112.0,  # 5 + 7 uploaded, 100 streamed; 1.0 is over a day old
        "users_amount_max": 100.0,
        "users_amount_count": 4,
        "users_item_histogram_7d": {"10": 2, "11": 1, "12": 1},  # maps: string keys
        "users_item_last_k_7d": [12, 11],
        "seller_users_amount_sum_1d": 3.0,  # the seller is user 2, at exactly AT − 1d
        "seller_users_amount_max": 3.0,
        "seller_users_amount_count": 1,
        "seller_users_item_histogram_7d": {"20": 1},
        "seller_users_item_last_k_7d": [20],
    }


def test_non_finite_floats_are_strings(client: TestClient) -> None:
    response = post(client, [{"user_id": 3, "seller_id": 4}, {"user_id": 5, "seller_id": 99}])
    assert response.status_code == 200
    assert "NaN" not in response.text.replace('"NaN"', "")  # strict JSON: no bare NaN
    nan_row, inf_row = (result["features"] for result in response.json()["results"])
    assert nan_row["users_amount_sum_1d"] == "NaN"
    assert nan_row["seller_users_amount_max"] == "Infinity"
    assert inf_row["users_amount_sum_1d"] == "-Infinity"
    assert inf_row["seller_users_amount_count"] == 0  # key 99: no event, the empty window
    assert inf_row["seller_users_amount_sum_1d"] is None
    json.loads(response.text, parse_constant=lambda name: pytest.fail(f"bare {name}"))


def test_many_rows_in_row_order(client: TestClient, uploaded: dict[str, Any]) -> None:
    rows = [{"user_id": user % 7, "seller_id": (user * 3) % 7} for user in range(600)]
    response = post(client, rows)
    assert response.status_code == 200
    results = response.json()["results"]
    assert len(results) == 600
    with LmdbStore(uploaded["uri"].removeprefix("lmdb://")) as store:
        expected = Fetcher(uploaded["model"], store).fetch(rows, at=AT)
    assert [result["features"] for result in results] == \
        [to_json_value(result.features) for result in expected]


def test_rows_of_one_key_are_answered_once_and_apart(uploaded: dict[str, Any]) -> None:
    """One user against many sellers: each distinct key is computed once, and every row gets
    its own lists and maps (a caller may change one row's without touching another's)."""
    rows = [{"user_id": 1, "seller_id": seller} for seller in (2, 1, 2, 4, 2)]
    with LmdbStore(uploaded["uri"].removeprefix("lmdb://")) as store:
        fetcher = Fetcher(uploaded["model"], store)
        asked: list[int] = []
        get_tiles = store.get_tiles
        store.get_tiles = lambda table, keys, *span: asked.append(len(keys)) or get_tiles(
            table, keys, *span)  # type: ignore[method-assign]
        together = fetcher.fetch(rows, at=AT)
        assert asked == [1, 3]  # the user part: one key; the seller part: 2, 1 and 4
        alone = [fetcher.fetch([row], at=AT)[0] for row in rows]
    assert [result.features for result in together] == [result.features for result in alone]
    first, _, third = (together[index].features for index in range(3))
    assert first["seller_users_item_histogram_7d"] == {20: 1}
    assert first["users_item_last_k_7d"] is not third["users_item_last_k_7d"]
    assert first["seller_users_item_histogram_7d"] is not third["seller_users_item_histogram_7d"]


def test_at_defaults_to_now(client: TestClient) -> None:
    before = time.time_ns() // 1_000_000
    response = post(client, [{"user_id": 1, "seller_id": 2}], at=None)
    after = time.time_ns() // 1_000_000
    assert response.status_code == 200
    body = response.json()
    assert before <= body["at"] <= after
    assert body["results"][0]["stale"] == ["users"]  # now is long after the upload's slack


def test_request_id_header(client: TestClient) -> None:
    response = client.post("/v1/features/model", json={"rows": [{"user_id": 1, "seller_id": 1}]},
                           headers={"X-Request-ID": "abc-123"})
    assert response.json()["request_id"] == "abc-123"


def test_health(client: TestClient) -> None:
    response = client.get("/health")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["store"].startswith("LmdbStore(")
    assert body["joins"]["model"] == {"ready": True, "key_columns": ["user_id", "seller_id"],
                                      "uploaded": {"users": DS}}
    pending = body["joins"]["pending"]
    assert pending["ready"] is False
    assert "never_uploaded" in pending["error"]
    assert "run timetile upload" in pending["fix"]
    assert body["log"] == {"enabled": False, "written": 0, "dropped": 0}


def error_of(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert {"error", "field", "fix"} <= set(body)
    return body


def test_unknown_join_is_404(client: TestClient) -> None:
    body = error_of(post(client, [{"user_id": 1}], join="modle"), 404)
    assert body["error"] == "no Join named 'modle' is served"
    assert body["field"] == "join"
    assert "model, pending" in body["fix"]
    body = error_of(client.post("/v1/features/modle", content=b"{not json"), 404)  # URL first
    assert body["field"] == "join"


@pytest.mark.parametrize(("request_line", "status", "field", "fix"), [
    (("GET", "/v1/nothing", None), 404, "path", "POST /v1/features/{join} or GET /health"),
    (("GET", "/v1/features/model", None), 405, "method", "use the method /docs gives"),
    (("POST", "/v1/features/model", b'{"rows": [], "at": 1' + b"0" * 5000 + b"}"), 400, "body",
     'send a JSON object such as {"rows": [{"user_id": 1, "seller_id": 1}]'),
])
def test_what_fastapi_refuses_is_answered_as_every_error(
        client: TestClient, request_line: tuple[str, str, bytes | None], status: int,
        field: str, fix: str) -> None:
    """No such path, a wrong method, a body FastAPI cannot parse: the same error body."""
    method, path, content = request_line
    response = client.request(method, path, content=content,
                              headers={"Content-Type": "application/json"})
    body = error_of(response, status)
    assert body["error"].startswith(f"{method} {path}: ")
    assert (body["field"], body["fix"][:len(fix)]) == (field, fix)


def test_not_uploaded_join_is_503(client: TestClient) -> None:
    body = error_of(post(client, [{"user_id": 1}], join="pending"), 503)
    assert body["error"].startswith("Join 'pending' is not ready: GroupBy never_uploaded")
    assert body["field"] == "join"
    assert "run timetile upload" in body["fix"]


def test_missing_key_column_is_422(client: TestClient) -> None:
    body = error_of(post(client, [{"user_id": 1, "seller_id": 2}, {"user_id": 1}]), 422)
    assert body["error"] == "rows[1]: lacks the key column seller_id"
    assert body["field"] == "rows[1]"
    assert body["fix"] == "give every row the key columns user_id, seller_id"


def test_bad_key_type_is_422(client: TestClient) -> None:
    body = error_of(post(client, [{"user_id": 1, "seller_id": 2}, {"user_id": "x",
                                                                    "seller_id": 2}]), 422)
    assert body["error"] == "rows[1].user_id: 'x' cannot be read as int"
    assert body["field"] == "rows[1].user_id"
    assert body["fix"] == "give user_id as int"


@pytest.mark.parametrize(("content", "field", "message"), [
    (b"{not json", "body", "body: is not valid JSON"),
    (b'{"at": 5}', "rows", "rows: field required"),
    (b'{"rows": {"user_id": 1}}', "rows", "rows: input should be a valid list"),
    (b'{"rows": [{"user_id": 1, "seller_id": 2}, 7]}', "rows[1]",
     "rows[1]: input should be a valid dictionary"),
    (b'{"rows": [], "at": "soon"}', "at", "at: input should be a valid integer"),
    (b'{"rows": [], "when": 5}', "when", "when: extra inputs are not permitted"),
])
def test_malformed_body_is_422(client: TestClient, content: bytes, field: str,
                               message: str) -> None:
    response = client.post("/v1/features/model", content=content,
                           headers={"Content-Type": "application/json"})
    body = error_of(response, 422)
    assert body["field"] == field
    assert body["error"].startswith(message)
    assert '{"rows": [{"user_id": 1, "seller_id": 1}]' in body["fix"]
    assert body["problems"][0]["field"] == field


@pytest.mark.parametrize("content_type", [None, "text/plain",
                                          "application/x-www-form-urlencoded"])
def test_a_body_not_sent_as_json_names_the_content_type(client: TestClient,
                                                        content_type: str | None) -> None:
    """``curl -d`` without ``-H`` sends a form: the fix is the header, not the body."""
    headers = {"Content-Type": content_type} if content_type else {}
    response = client.post("/v1/features/model", content=b'{"rows": [{"user_id": 1}]}',
                           headers=headers)
    body = error_of(response, 422)
    assert body["field"] == "Content-Type"
    assert body["error"] == (f"Content-Type: is {content_type!r}, so the body was not read as "
                             "JSON" if content_type else
                             "Content-Type: is missing, so the body was not read as JSON")
    assert body["fix"].startswith("send the header Content-Type: application/json; send a JSON")
    ok = client.post("/v1/features/model", content=b'{"rows": []}',
                     headers={"Content-Type": "application/json; charset=utf-8"})
    assert ok.status_code == 200, ok.text


def test_an_int_key_as_a_float_beyond_2_53_is_422(client: TestClient) -> None:
    """The JSON float 1152921504606847000.0 is 2**60 to every parser: not a key to guess."""
    body = error_of(client.post("/v1/features/model", content=b'{"rows": [{"user_id": '
                                b'1152921504606847000.0, "seller_id": 2}]}',
                                headers={"Content-Type": "application/json"}), 422)
    assert body["field"] == "rows[0].user_id"
    assert "is a float at or beyond 2**53" in body["error"]
    assert post(client, [{"user_id": 1.0, "seller_id": 2}]).status_code == 200


def test_health_of_metadata_it_cannot_read(uploaded: dict[str, Any], tmp_path: Path) -> None:
    """Metadata of another format (a newer timetile's upload) is "not ready", not a 500."""
    copy = tmp_path / "store"
    shutil.copytree(str(uploaded["uri"]).removeprefix("lmdb://"), copy)
    with LmdbStore(str(copy)) as store:
        app = create_app({"model": uploaded["model"]}, store)
        with TestClient(app) as client:
            assert client.get("/health").json()["joins"]["model"]["ready"] is True
            store.multi_put(META_TABLE, [(b"users", b"\x00of another version")])
            response = client.get("/health")
            assert response.status_code == 200, response.text
            model = response.json()["joins"]["model"]
    assert model["ready"] is False
    assert model["error"].startswith("GroupBy users: state bytes: expected format version")
    assert model["fix"].startswith("run timetile upload")


def test_empty_rows_answer_no_results(client: TestClient) -> None:
    response = post(client, [])
    assert response.status_code == 200
    assert response.json()["results"] == []


def test_openapi_docs_show_an_example(client: TestClient) -> None:
    assert client.get("/docs").status_code == 200
    spec = client.get("/openapi.json").json()
    operation = spec["paths"]["/v1/features/{join}"]["post"]
    examples = operation["requestBody"]["content"]["application/json"]["examples"]
    assert examples["model"]["value"]["rows"][0] == {"user_id": 1, "seller_id": 1}
    assert {"404", "422", "503"} <= set(operation["responses"])
    assert "NaN" in spec["info"]["description"]


def test_uploads_are_picked_up_without_restart(uploaded: dict[str, Any], tmp_path: Path
                                               ) -> None:
    uri = f"lmdb://{tmp_path / 'store'}"
    app = create_app({"model": uploaded["model"]}, uri, refresh_seconds=0)
    with TestClient(app) as client:
        assert error_of(post(client, [{"user_id": 1, "seller_id": 2}]), 503)["field"] == "join"
        assert client.get("/health").json()["joins"]["model"]["ready"] is False
        users = uploaded["model"].join_parts[0].group_by
        upload_by_hand(uri, users, DS)  # the first upload
        response = post(client, [{"user_id": 2, "seller_id": 2}])
        assert response.status_code == 200
        assert response.json()["results"][0]["features"]["users_amount_sum_1d"] == 3.0
        upload_by_hand(uri, users, "2024-01-03")  # the next day's
        health = client.get("/health").json()
        assert health["joins"]["model"]["uploaded"] == {"users": "2024-01-03"}
        late = DAY_END + 2 * DAY_MS - HOUR_MS  # stale for the first upload, not the second
        assert post(client, [{"user_id": 2, "seller_id": 2}], at=late).json()[
            "results"][0]["stale"] == []


def test_an_unreachable_store_is_503(uploaded: dict[str, Any]) -> None:
    server = RedisServer().start()
    url = server.url
    try:
        upload_by_hand(url, uploaded["model"].join_parts[0].group_by, DS)
        app = create_app({"model": uploaded["model"]}, url)
        with TestClient(app) as client:
            assert post(client, [{"user_id": 2, "seller_id": 2}]).status_code == 200
            server.stop()
            body = error_of(post(client, [{"user_id": 2, "seller_id": 2}]), 503)
            assert body["error"].startswith(f"the store RedisStore('{url}') cannot be "
                                            "reached")
            assert body["field"] == "store"
            assert "reachable" in body["fix"]
            health = client.get("/health")
            assert health.status_code == 503
            assert health.json()["status"] == "unavailable"
            assert health.json()["joins"]["model"]["ready"] is False
    finally:
        server.stop()


def test_responses_are_logged(uploaded: dict[str, Any], tmp_path: Path) -> None:
    log_dir = tmp_path / "log"
    app = create_app({"model": uploaded["model"]}, uploaded["uri"], log_dir=str(log_dir))
    rows = [{"user_id": 3, "seller_id": 1, "extra": "not logged"}, {"user_id": 1,
                                                                     "seller_id": 2}]
    with TestClient(app) as client:
        response = post(client, rows)
        assert response.status_code == 200
    # leaving the client shut the app down: the log is flushed
    table = pq.read_table(log_dir / "model")
    assert table.num_rows == 2
    assert table.column("request_id").to_pylist() == [response.json()["request_id"]] * 2
    assert table.column("row_index").to_pylist() == [0, 1]
    assert table.column("request_time").to_pylist() == [AT, AT]
    assert [json.loads(keys) for keys in table.column("keys").to_pylist()] == \
        [{"user_id": 3, "seller_id": 1}, {"user_id": 1, "seller_id": 2}]
    features = [json.loads(text) for text in table.column("features").to_pylist()]
    assert features == [result["features"] for result in response.json()["results"]]
    assert features[0]["users_amount_sum_1d"] == "NaN"
    # what served them, so the consistency job leaves out another definition's rows
    assert table.column("definition").to_pylist() == [served_definition(uploaded["model"])] * 2
    assert list(json.loads(table.column("definition")[0].as_py())) == sorted(
        part.label for part in uploaded["model"].join_parts)
    assert app.state.response_log.written == 2

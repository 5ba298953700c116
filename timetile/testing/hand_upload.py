"""One key's upload written by hand, without Spark: for Spark-free fetcher tests and benchmarks.

``timetile.offline.upload.upload`` runs a Spark job that writes, per GroupBy, its metadata
and one batch record per key. :func:`upload_key` writes the same two things for one key
from arrays, so a test or benchmark can build a hot key's record (and stream tiles after it
with :func:`timetile.store.tiles.put_events`) in milliseconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from timetile.api.group_by import GroupBy
from timetile.core.batch_record import DEFAULT_SLACK_MS, Series, build_record
from timetile.store.kv import KVStore
from timetile.store.layout import (
    META_TABLE,
    GroupByMeta,
    batch_table,
    encode_key,
    feature_signature,
    online_features,
)


def upload_key(store: KVStore, group_by: GroupBy, day_end: int, columns: Mapping[str, Series],
               *, value_types: Mapping[str, str], key: Sequence[Any] = (1,),
               key_types: Sequence[str] = ("int",), slack: int = DEFAULT_SLACK_MS
               ) -> GroupByMeta:
    """Write ``group_by``'s metadata and ``key``'s batch record as of ``day_end``; return it.

    ``columns`` maps each aggregated column to its key's non-null values and their times
    (int64, sorted, all before ``day_end``); ``value_types`` gives each column's coarse type
    (``"int"``, ``"float"``, ...). Generation 0. O(events).
    """
    meta = GroupByMeta(day_end, slack, tuple(key_types), dict(value_types),
                       feature_signature(group_by), generation=0)
    store.multi_put(META_TABLE, [(group_by.name.encode(), meta.to_bytes())])
    features = online_features(group_by, meta.value_types)
    record = build_record(features, {feature.series: columns[feature.series]
                                     for feature in features},
                          day_end, slack, signature=meta.signature, generation=0)
    store.multi_put(batch_table(group_by.name), [(encode_key(list(key), tuple(key_types)),
                                                  record)])
    return meta

"""Stored hop partials, so later backfills reuse the work of earlier ones (seed 001, DESIGN §4).

A hop partial is the state of one key's events in one hop. Hops divide a day, and a day of
events is immutable once it has landed, so a day's partials, once computed, hold for every
later backfill of the same definition. They are stored as Parquet under
``{root}/{group_by}/{signature}/epoch_day=N`` where the signature hashes what the partials
depend on (the hop size, the aggregations, and the source's table, time column, ``select``
and ``where``), so a changed definition never reads stale partials. A run writes only the
days the store lacks, each whole (dynamic partition overwrite), so a range run again never
double counts. Runs one after another share a store; two runs at once that may write the same
days need stores of their own (Spark's dynamic overwrite is not safe for two jobs committing
to one path). A stored day is never rewritten: a day whose events changed after it was stored
needs its ``epoch_day`` folders deleted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession

from timetile.core.timeutil import DAY_MS, ms_to_iso
from timetile.spark.sources import copy_folder, literal_path, subfolders

#: The partition column of stored partials: days since the epoch, UTC.
EPOCH_DAY = "epoch_day"


def day_label(day: int) -> str:
    """Return the ISO date of an epoch day, for messages (its number outside years 1-9999)."""
    text = ms_to_iso(day * DAY_MS)
    return text[:10] if text[:1].isdigit() else f"epoch day {day}"


def _folder_day(name: str) -> int | None:
    """Return the day of a store's ``epoch_day=N`` folder; None for a folder of another name."""
    prefix = f"{EPOCH_DAY}="
    digits = name[len(prefix):]
    return int(digits) if name.startswith(prefix) and digits.lstrip("-").isdigit() else None


def copy_days(spark: SparkSession, source_root: str, target_root: str,
              chosen: Callable[[int], bool]) -> int | None:
    """Copy the stored days that ``chosen`` picks, of every GroupBy and signature, to a root.

    Both roots are ``partials_path`` folders: the copy keeps the layout
    (``{group_by}/{signature}/epoch_day=N``), so a backfill on ``target_root`` reuses the
    copied days as its own. Returns how many day folders were copied, or None where the
    session's file systems cannot be listed (Spark Connect). No Spark job: the driver
    copies the files.
    """
    copied = 0
    group_bys = subfolders(spark, source_root)
    if group_bys is None:
        return None
    for group_by in group_bys:
        for digest in subfolders(spark, f"{source_root}/{group_by}") or []:
            folder = f"{group_by}/{digest}"
            for name in subfolders(spark, f"{source_root}/{folder}") or []:
                day = _folder_day(name)
                if day is not None and chosen(day):
                    if not copy_folder(spark, f"{source_root}/{folder}/{name}",
                                       f"{target_root}/{folder}/{name}"):
                        return None
                    copied += 1
    return copied


@dataclass(frozen=True)
class PartialStore:
    """Where one GroupBy's hop partials live, for one signature of its definition."""

    location: str

    @classmethod
    def at(cls, root: str, group_by: str, signature: str) -> PartialStore:
        """Return the store of ``group_by`` under ``root`` for a definition signature."""
        digest = hashlib.sha256(signature.encode()).hexdigest()[:16]
        return cls(f"{root.rstrip('/')}/{group_by}/{digest}")

    def stored_days(self, spark: SparkSession) -> set[int]:
        """Return the days already stored: a listing of the store's ``epoch_day=N`` folders.

        No Spark job where the session has a JVM to list with; else a scan of the partition
        column.
        """
        names = subfolders(spark, self.location)
        if names is not None:
            return {day for day in map(_folder_day, names) if day is not None}
        try:
            frame = spark.read.parquet(literal_path(self.location))
        except AnalysisException:  # nothing stored yet
            return set()
        # int(): the day reads back as text when the session infers no partition types
        return {int(row[0]) for row in frame.select(EPOCH_DAY).distinct().collect()}

    def write(self, partials: DataFrame) -> None:
        """Write partials (with an :data:`EPOCH_DAY` column), replacing the days they cover.

        Dynamic partition overwrite is this write's option, so the session's setting is
        neither read nor changed (another job of the session may be writing).
        """
        (partials.write.mode("overwrite").option("partitionOverwriteMode", "dynamic")
         .partitionBy(EPOCH_DAY).parquet(self.location))

    def read(self, spark: SparkSession) -> DataFrame:
        """Every stored partial."""
        return spark.read.parquet(literal_path(self.location))

"""The embedded default event source of a stream: a directory that files land in.

Spark's file stream source lists the directory each trigger and reads the files it has not
read yet, oldest modification time first; the checkpoint remembers which files it read, so
a restart neither skips nor rereads one. A file must be complete when it appears: write it
elsewhere and move it in (a rename is atomic on one filesystem).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

#: The file formats a directory source reads.
FORMATS = ("json", "parquet")


@dataclass(frozen=True)
class FileSource:
    """Events as files in a directory: JSON lines or Parquet.

    Each JSON line is one event, an object of the source's raw columns (before its
    ``select``); a malformed line reads as a row of nulls, counted as unusable by the job.
    Times are what the batch source holds: epoch ms, or ISO-8601 strings.

    Args:
        path: the directory (any path Spark reads: local, ``s3a://``, ``hdfs://``).
        format: ``json`` (JSON lines) or ``parquet``.
        max_files_per_trigger: read at most this many new files per micro-batch; None: all.

    >>> FileSource("/data/events", "csv")
    Traceback (most recent call last):
    ValueError: file source format 'csv': use json or parquet

    """

    path: str
    format: str = "json"
    max_files_per_trigger: int | None = None

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"file source format {self.format!r}: use {' or '.join(FORMATS)}")
        if self.max_files_per_trigger is not None and self.max_files_per_trigger < 1:
            raise ValueError(f"max_files_per_trigger {self.max_files_per_trigger}: use 1 or "
                             "more, or None for every new file")

    def read_stream(self, spark: SparkSession, schema: StructType) -> DataFrame:
        """Return the directory as a streaming DataFrame of ``schema``'s columns. No job runs."""
        reader = spark.readStream.schema(schema).format(self.format)
        if self.max_files_per_trigger is not None:
            reader = reader.option("maxFilesPerTrigger", str(self.max_files_per_trigger))
        return reader.load(self.path)

    def describe(self) -> str:
        """Name the source in logs and messages."""
        return f"dir:{self.path} ({self.format})"

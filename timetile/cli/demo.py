"""``timetile demo``: generate the marketplace data, backfill it, upload, stream and fetch."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from timetile import demo as examples
from timetile.api.join import Join
from timetile.cli.backfill import OutputFormat, run_backfill
from timetile.cli.common import (
    CliError,
    Debug,
    check_writable,
    load_joins,
    pick_join,
    spark_session,
    user_errors,
)
from timetile.cli.common import console as stdout_console
from timetile.cli.progress import JobProgress
from timetile.cli.render import print_features, print_report, print_rows, print_summary
from timetile.core.locations import overlapping
from timetile.core.timeutil import ms_to_iso

if TYPE_CHECKING:
    from timetile.demo.serving import DemoFetch


_DEMO_EXAMPLE = """\
[bold]Example[/]

  [cyan]timetile demo[/]                                  [dim]# 200k views, the default[/]
  [cyan]timetile demo --events 2000000 --data-dir /tmp/tt-demo[/]   [dim]# bigger[/]

  [dim]Then rerun the backfill yourself, or edit the definitions:[/]
  [cyan]timetile backfill timetile/demo/checkout_model.py --start 2024-02-01 --end 2024-02-29 \\
      --output timetile-demo/output/checkout_model --overwrite --show 3[/]
"""


def demo(
    *,
    data_dir: Annotated[Path, typer.Option(
        help="Where to write the demo data.", envvar=examples.DATA_ENV)
    ] = Path(examples.DEFAULT_DATA_DIR),
    events: Annotated[int, typer.Option(help="How many views; other tables scale with it.",
                                        min=100)] = 200_000,
    seed: Annotated[int, typer.Option(help="Random seed of the data.")] = 7,
    output: Annotated[Path | None, typer.Option(
        help="Where to write the features \\[default: DATA_DIR/../output/checkout_model].",
        show_default=False)] = None,
    show: Annotated[int, typer.Option(help="How many sample rows to print.", min=0)] = 5,
    debug: Debug = False,
) -> None:
    """Generate a marketplace dataset, backfill a checkout model on it, show the result.

    Writes users, listings, views, purchases, checkouts (with a few duplicate rows and
    rows without a time) and listing ratings as Parquet, computed by Spark from spark.range
    so it scales; backfills the features of timetile/demo/checkout_model.py for February 2024 on
    local Spark; then uploads the state as of 2024-02-28 to an embedded store, lands the
    next morning's events and rating changes as JSON-lines files (DATA_DIR/../landing),
    streams them into the store with the Structured Streaming job and fetches one row's
    features (the checkout model's, and the listing's rating) at noon, online.
    """
    from timetile.demo import data as demo_data  # noqa: PLC0415  (Spark and the engine)
    from timetile.demo.serving import (  # noqa: PLC0415
        demo_folders,
        serve_demo_fetch,
        store_problem,
    )

    console = stdout_console()
    with user_errors(debug):
        try:
            definitions = examples.example_path()
        except FileNotFoundError as error:
            raise CliError(str(error)) from error
        target = output or data_dir.parent / "output" / "checkout_model"
        check_writable("--data-dir", str(data_dir))
        check_writable("--output", str(target))
        problem = store_problem(data_dir)
        if problem is not None:
            raise CliError(f"--data-dir {data_dir}: {problem}.")
        used = overlapping(str(target), [str(folder) for folder in demo_folders(data_dir)])
        if used is not None:
            raise CliError(f"--output {target}: the demo reads or replaces {used}, which "
                           "writing there would destroy. Fix: write the output elsewhere.")
        began = time.perf_counter()
        with JobProgress(None, console) as progress, spark_session(progress) as spark:
            with progress.stage(f"generate data ({events:,} views) in {data_dir}"):
                demo_data.generate(spark, data_dir, events=events, seed=seed)
            with _environment(examples.DATA_ENV, str(data_dir)):
                chosen = pick_join(definitions, load_joins(definitions), "checkout_model")
                ratings_file = examples.example_path("listing_ratings")
                ratings = pick_join(ratings_file, load_joins(ratings_file), "listing_ratings")
            # online: the checkout model plus the listing's rating, streamed from its change log
            online = Join(chosen.name, chosen.left, [*chosen.parts, ratings.parts[0]])
            result = run_backfill(spark, chosen, progress, start=demo_data.BACKFILL_START,
                                  end=demo_data.BACKFILL_END, output=str(target),
                                  output_format=OutputFormat.parquet, strict=False,
                                  overwrite=True)
            sample = result.output.limit(show).collect() if show else []
            asked = [{key: row[key] for key in ("user_id", "seller_id", "listing_id")}
                     for row in sample[:1]]
            with progress.stage(f"upload the state as of {demo_data.SERVE_DS}, stream the "
                                "next morning's landed files, fetch online"):
                served = serve_demo_fetch(spark, online, data_dir, demo_data.SERVE_DS, asked or [
                    {"user_id": 0, "seller_id": 0, "listing_id": 0}])
        seconds = time.perf_counter() - began
        print_report(console, result.report, str(target), result.rows)
        if sample:
            print_rows(console, sample, f"{len(sample)} sample rows of {chosen.name}")
        fetched = served.results[0]
        agreement = (f"equal to a backfill at that millisecond for all {len(fetched.features)} "
                     "features" if not served.mismatches else
                     f"DIFFERENT from the backfill for {', '.join(served.mismatches)}")
        print_features(console, fetched.features, set(), stale=fetched.stale, title=(
            f"served online from {served.store_uri} at {ms_to_iso(served.at)} for "
            f"{served.rows[0]}: the upload as of {demo_data.SERVE_DS} plus "
            f"{served.streamed:,} events and rating changes streamed by Structured Streaming from "
            f"{served.landing} in {served.batches} micro-batches{_not_written(served)}, "
            f"{agreement}"))
        print_summary(console, chosen, result.report, rows=result.rows, seconds=seconds,
                      definitions=definitions, output=target)


def _not_written(served: DemoFetch) -> str:
    """Name the demo's events the streams did not write (late or unusable), if any."""
    counts = served.counts
    left = counts.late + counts.behind_watermark + counts.unusable
    return f" ({left:,} late or unusable, not written)" if left else ""


@contextmanager
def _environment(name: str, value: str) -> Iterator[None]:
    previous = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            del os.environ[name]
        else:
            os.environ[name] = previous


def register(app: typer.Typer) -> None:
    """Add ``demo`` to ``app``."""
    app.command(epilog=_DEMO_EXAMPLE)(demo)

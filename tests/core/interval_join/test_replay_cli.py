"""``timetile join replay``: a transcript step by step; a wrong expectation exits 1."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from timetile.cli.app import app
from timetile.cli.join import MISMATCH_EXIT

EXAMPLE = Path(__file__).parent / "transcripts" / "worked_example.txt"


def test_a_transcript_replays_step_by_step() -> None:
    result = CliRunner().invoke(app, ["join", "replay", str(EXAMPLE), "--restart-before", "5"])
    assert result.exit_code == 0, result.output
    assert "  4  r t=100\n       > join d=101 o=102 | t=100\n" in result.stdout
    assert "all 8 steps as the transcript says" in result.stdout


def test_a_step_that_differs_is_marked_and_exits_1(tmp_path: Path) -> None:
    path = tmp_path / "wrong.txt"
    path.write_text("condition: l.t = r.t\nleft: t\nright: t\n\nl t=0\nr t=0\n> join t=0 | t=1\n")
    result = CliRunner().invoke(app, ["join", "replay", str(path)])
    assert result.exit_code == MISMATCH_EXIT
    assert "expected ['join t=0 | t=1']" in result.stdout
    assert "1 step(s) differ from the transcript" in result.stdout
    path.write_text("condition: l.t = r.t\nleft: t\nright: t\n\nl t=0\n= late=1\n")
    result = CliRunner().invoke(app, ["join", "replay", str(path)])
    assert result.exit_code == MISMATCH_EXIT
    assert "expected counts {'late': 1}, got {'late': 0}" in result.stdout


def test_bad_files_and_steps_are_named(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["join", "replay", str(tmp_path / "none.txt")])
    assert result.exit_code == 2
    assert "is no file" in result.stderr
    path = tmp_path / "bad.txt"
    path.write_text("condition: l.t = r.t\nleft: t\nright: t\n\nl t=0\nfly away\n")
    result = CliRunner().invoke(app, ["join", "replay", str(path)])
    assert result.exit_code == 2
    assert "bad.txt:6: 'fly away' is no step" in result.stderr
    for text, message in (("condition: l.t = r.t OR l.t = 1\nleft: t\nright: t\n",
                           "bad.txt: the header: condition .* has an OR"),
                          ("condition: l.t = r.t\nhow: outer\nleft: t\nright: t\n",
                           "bad.txt: the header: how is 'outer'"),
                          ("condition: l.t = r.t\nleft: t\nright: t\nwm l.t 1.5\n",
                           "bad.txt:4: 'wm l.t 1.5': invalid literal"),
                          ("condition: l.t = r.t\nleft: t\nright: t\nwm l.u 1\n",
                           r"bad.txt:4: \('l', 'u'\) is no watermarked field")):
        path.write_text(text)
        result = CliRunner().invoke(app, ["join", "replay", str(path)])
        assert result.exit_code == 2, result.output
        assert re.search(message, result.stderr), result.stderr
    result = CliRunner().invoke(app, ["join", "replay", str(EXAMPLE), "--restart-before", "9"])
    assert result.exit_code == 2
    assert "--restart-before 9 is no step: the transcript has 8 steps" in result.stderr

"""The errors a definition raises: each names the field at fault and the fix."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a definition.

    Attributes:
        field: where it is, as a path a user can follow (``parts[0].aggregations[1].op``).
        message: what is wrong.
        fix: what to do about it.

    """

    field: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}. Fix: {self.fix}."


class DefinitionError(ValueError):
    """A definition that cannot work. Raised before any job starts.

    ``problems`` lists every problem found, so one run shows them all.
    """

    def __init__(self, subject: str, problems: Iterable[Problem]) -> None:
        self.subject = subject
        self.problems = tuple(problems)
        lines = "\n".join(f"  - {problem}" for problem in self.problems)
        count = len(self.problems)
        noun = "problem" if count == 1 else "problems"
        super().__init__(f"{count} {noun} in {subject}:\n{lines}")

    @classmethod
    def single(cls, subject: str, field: str, message: str, fix: str) -> DefinitionError:
        """Return an error with one problem."""
        return cls(subject, [Problem(field, message, fix)])


def one_of(name: str, choices: Iterable[str]) -> str:
    """Return a fix that lists the valid choices and suggests the closest one.

    >>> one_of("summ", ["sum", "count"])
    "use one of sum, count (did you mean 'sum'?)"
    """
    options = list(choices)
    close = difflib.get_close_matches(name, options, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"use one of {', '.join(options)}{hint}"


def expect_argument(name: str, value: object, kind: type | tuple[type, ...], wanted: str,
                    fix: str) -> None:
    """Raise a TypeError naming argument ``name`` and ``fix`` unless ``value`` is a ``kind``.

    >>> expect_argument("spark", None, str, "a SparkSession", "pass the session")
    Traceback (most recent call last):
    TypeError: spark is None, not a SparkSession. Fix: pass the session.
    """
    if isinstance(value, kind):
        return
    shown = repr(value)
    if len(shown) > 80:
        shown = f"a {type(value).__name__}"
    raise TypeError(f"{name} is {shown}, not {wanted}. Fix: {fix}.")

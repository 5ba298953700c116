"""Windows: which span of events before a query an aggregation sees (DESIGN §2, contract)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from timetile.api.errors import DefinitionError
from timetile.core.timeutil import DAY_MS, format_duration, parse_duration
from timetile.core.windows import WindowKind, window_bounds


@dataclass(frozen=True)
class Window:
    """A window of ``length`` before each query, sliding, sawtooth or hopping.

    Args:
        length: ``"<n><unit>"`` with unit one of ``s m h d``, or milliseconds.
        hop: for sawtooth and hopping windows, the hop; the tail of the window moves in
            steps of ``hop``. Giving a hop without a kind means sawtooth.
        kind: ``"sliding"`` (the default without a hop), ``"sawtooth"`` (the default with a
            hop) or ``"hopping"``.

    >>> Window("7d").name, Window("7d", hop="1h").name, Window("1d", "1h", "hopping").name
    ('7d', '7d_hop1h', '1d_hopping1h')
    >>> Window.parse("90m") == Window("90m")
    True

    """

    length: str | int
    hop: str | int | None = None
    kind: str | None = None

    def __post_init__(self) -> None:
        length_ms = _to_millis(self.length, "length")
        hop_ms = None if self.hop is None else _to_millis(self.hop, "hop")
        kind = _resolve_kind(self.kind, hop_ms)
        if hop_ms is not None and hop_ms > length_ms:
            raise _error(
                "hop",
                f"hop {format_duration(hop_ms)} is longer than the window "
                f"{format_duration(length_ms)}",
                "use a hop no longer than the length",
            )
        object.__setattr__(self, "length", length_ms)
        object.__setattr__(self, "hop", hop_ms)
        object.__setattr__(self, "kind", kind.value)

    @classmethod
    def parse(cls, spec: str | Window) -> Window:
        """Return a window from its string form (``"7d"``), or the window itself."""
        return spec if isinstance(spec, Window) else cls(spec)

    @property
    def length_ms(self) -> int:
        """The window's length in milliseconds."""
        assert isinstance(self.length, int)
        return self.length

    @property
    def hop_ms(self) -> int | None:
        """The hop in milliseconds, or None for sliding windows."""
        assert self.hop is None or isinstance(self.hop, int)
        return self.hop

    @property
    def window_kind(self) -> WindowKind:
        """The kind as an enum."""
        return WindowKind(self.kind)

    @property
    def name(self) -> str:
        """The suffix of output columns: ``7d``, ``7d_hop1h``, ``7d_hopping1h``."""
        length = format_duration(self.length_ms)
        if self.hop_ms is None:
            return length
        infix = "hop" if self.window_kind is WindowKind.SAWTOOTH else "hopping"
        return f"{length}_{infix}{format_duration(self.hop_ms)}"

    def bounds(self, query_times: Any) -> tuple[Any, Any]:
        """Return the ``[start, end)`` of this window for each of an int64 array of times.

        The arithmetic lives in :func:`timetile.core.windows.window_bounds` (numpy arrays).
        """
        return window_bounds(query_times, self.window_kind, self.length_ms, self.hop_ms)


def window_spec(window: Window | None) -> tuple[WindowKind, int | None, int | None]:
    """Return a window as the core's (kind, length, hop); None is the lifetime window.

    >>> window_spec(Window("1d", hop="1h"))[0], window_spec(None)
    (<WindowKind.SAWTOOTH: 'sawtooth'>, (<WindowKind.LIFETIME: 'lifetime'>, None, None))
    """
    if window is None:
        return WindowKind.LIFETIME, None, None
    return window.window_kind, window.length_ms, window.hop_ms


def _error(field: str, message: str, fix: str) -> DefinitionError:
    return DefinitionError.single("Window", field, message, fix)


#: The longest window or hop: 10,000 years (365-day), so that a window's start stays far
#: inside int64 milliseconds for any real time. Longer is a lifetime window.
MAX_WINDOW_MS = 10_000 * 365 * DAY_MS


def _to_millis(value: str | int, field: str) -> int:
    fix = "write '<n><unit>' with unit one of s, m, h, d (e.g. '90m'), or milliseconds as an int"
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise _error(field, f"{value!r} is not a duration", fix)
    if isinstance(value, int):
        if value <= 0:
            raise _error(field, f"{value} ms is not positive", "give a positive length")
        millis = value
    else:
        try:
            millis = parse_duration(value, allow_zero=True)
        except ValueError:
            raise _error(field, f"{value!r} is not a duration", fix) from None
        if millis == 0:
            raise _error(field, f"{value!r} is not positive", "give a positive length")
    if millis > MAX_WINDOW_MS:
        raise _error(field, f"{value!r} is longer than 10,000 years",
                     "leave windows out (None) for a lifetime window" if field == "length"
                     else "use a hop no longer than the length")
    return millis


def _resolve_kind(kind: str | None, hop_ms: int | None) -> WindowKind:
    if kind is None:
        return WindowKind.SLIDING if hop_ms is None else WindowKind.SAWTOOTH
    allowed = {k.value: k for k in (WindowKind.SLIDING, WindowKind.SAWTOOTH, WindowKind.HOPPING)}
    resolved = allowed.get(kind) if isinstance(kind, str) else None
    if resolved is None:
        raise _error(
            "kind",
            f"{kind!r} is not a window kind",
            "use 'sliding', 'sawtooth' or 'hopping' (for a lifetime aggregation give no windows)",
        )
    if resolved is WindowKind.SLIDING and hop_ms is not None:
        raise _error("hop", "a sliding window has no hop", "drop hop, or use kind='sawtooth'")
    if resolved is not WindowKind.SLIDING and hop_ms is None:
        raise _error("hop", f"a {kind} window needs a hop", "give a hop such as hop='1h'")
    return resolved

"""Cut a consistency report's SVG plots out as PNGs (for docs/consistency/).

Usage: ``python scripts/consistency_pngs.py REPORT.html OUT_DIR``. Writes
``mismatch_rate.png`` (the report's line chart) and ``differences.png`` (its first six
histograms on a 3 × 2 grid) with ``rsvg-convert`` (Debian: ``librsvg2-bin``) at 1.5 × zoom.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

_STYLE = "<style>text { font-size: 10px; font-family: sans-serif; }</style>"
_SVG = re.compile(r"<svg.*?</svg>", re.DOTALL)


def _size(svg: str) -> tuple[int, int]:
    width = re.search(r'width="(\d+)"', svg)
    height = re.search(r'height="(\d+)"', svg)
    assert width is not None
    assert height is not None
    return int(width.group(1)), int(height.group(1))


def _page(inner: str, width: int, height: int) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}">{_STYLE}'
            f'<rect width="{width}" height="{height}" fill="white"/>{inner}</svg>')


def main(report: Path, out: Path, columns: int = 3, gap: int = 12) -> None:
    """Write the two PNGs of ``report`` into ``out``."""
    line, *histograms = _SVG.findall(report.read_text(encoding="utf-8"))
    histograms = histograms[:6]
    width, height = _size(histograms[0])
    rows = -(-len(histograms) // columns)
    grid = "".join(
        svg.replace("<svg ", f'<svg x="{(i % columns) * (width + gap)}" '
                    f'y="{(i // columns) * (height + gap)}" ', 1)
        for i, svg in enumerate(histograms))
    pages = {"mismatch_rate": _page(line, *_size(line)),
             "differences": _page(grid, columns * width + (columns - 1) * gap,
                                  rows * height + (rows - 1) * gap)}
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        for name, page in pages.items():
            svg = Path(scratch) / f"{name}.svg"
            svg.write_text(page, encoding="utf-8")
            subprocess.run(["rsvg-convert", "-z", "1.5", str(svg), "-o",
                            str(out / f"{name}.png")], check=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))

"""Small figures for the UI: a species' points on a map, a histogram; PNG bytes, and the markdown that
embeds them in Dagster metadata (as Dagster's docs embed plots: a data URI in markdown metadata).

Each figure is stored in Dagster's event log with its materialization, so they are small: about 3 to 6 kB
at 288 x 216 pixels in 64 colours. matplotlib's Agg canvas needs no display (and no pyplot); it is
imported on first use, since most runs skip every partition and draw nothing. The same input draws the
same bytes (no timestamp is written).
"""

from __future__ import annotations

import base64
import io
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

WIDTH_INCHES, HEIGHT_INCHES, DPI = 4.0, 3.0, 72
# PNG text chunks: matplotlib writes its version as "Software"; nothing that changes from run to run.
PNG_METADATA = {"Software": None}
PALETTE_COLOURS = 64


def _figure() -> Any:
    """A figure drawn by the Agg canvas directly: no pyplot state, no display, no window manager."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(WIDTH_INCHES, HEIGHT_INCHES), dpi=DPI)
    FigureCanvasAgg(figure)
    # Fixed margins: tight_layout measures every label first and took most of the drawing time.
    figure.subplots_adjust(left=0.17, right=0.96, bottom=0.16, top=0.9)
    return figure


def _png(figure: Any) -> bytes:
    """The figure as a PNG of at most PALETTE_COLOURS colours (a third of the bytes: each is stored in the
    event log with every materialization that shows it)."""
    from PIL import Image

    drawn = io.BytesIO()
    figure.savefig(drawn, format="png", dpi=DPI, metadata=PNG_METADATA)
    drawn.seek(0)
    with Image.open(drawn) as image:
        palette = image.convert("RGB").quantize(colors=PALETTE_COLOURS, method=Image.Quantize.MEDIANCUT)
    small = io.BytesIO()
    palette.save(small, format="PNG", optimize=True)
    return small.getvalue()


def points_map_png(cells: Sequence[tuple[float, float, int]], title: str) -> bytes:
    """Points counted on a grid (cell centre longitude, latitude, count), darker where there are more."""
    figure = _figure()
    axes = figure.add_subplot()
    if cells:
        import numpy as np

        # Arrays, not tuples: matplotlib makes a masked array of a sequence one element at a time, which
        # took half the drawing time of a species with some thousands of cells. The same pixels either way.
        grid = np.array(cells, dtype=np.float64).reshape(-1, 3)
        longitudes, latitudes = grid[:, 0], grid[:, 1]
        counts = np.array([count for _, _, count in cells], dtype=np.int64)
        axes.scatter(longitudes, latitudes, c=counts, s=9, cmap="viridis", marker="s", linewidths=0)
        # Degrees of longitude shrink with latitude: equal metres on both axes at the points' latitude.
        middle = (float(latitudes.min()) + float(latitudes.max())) / 2
        axes.set_aspect(1 / max(0.2, _cos_degrees(middle)), adjustable="datalim")
    else:
        axes.text(0.5, 0.5, "no point", ha="center", va="center", transform=axes.transAxes)
    axes.set_xlabel("longitude")
    axes.set_ylabel("latitude")
    axes.set_title(title, fontsize=9)
    axes.tick_params(labelsize=7)
    return _png(figure)


def histogram_png(edges: Sequence[float], counts: Sequence[int], xlabel: str, title: str) -> bytes:
    """Bars of ``counts`` between consecutive ``edges``."""
    figure = _figure()
    axes = figure.add_subplot()
    widths = [right - left for left, right in zip(edges[:-1], edges[1:], strict=True)]
    axes.bar(edges[:-1], counts, width=widths, align="edge", edgecolor="white")
    axes.set_xlabel(xlabel)
    axes.set_ylabel("records")
    axes.set_title(title, fontsize=9)
    axes.tick_params(labelsize=7)
    return _png(figure)


# A figure kept beside the data is named by the first characters of the job key of what it shows.
KEY_CHARACTERS = 16


def kept_figure(folder: Path, name: str, job_key: str, draw: Callable[[], bytes | None]) -> bytes | None:
    """The figure of ``name`` for ``job_key``: read when kept, else drawn and kept (an older one of the same
    name removed). The same key shows the same rows, so a skip shows it again without drawing it."""
    path = folder / f"{name}.{job_key[:KEY_CHARACTERS]}.png"
    if path.is_file():
        return path.read_bytes()
    png = draw()
    if png is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    staging = path.with_suffix(".png.staging")
    staging.write_bytes(png)
    os.replace(staging, path)
    for old in folder.glob(f"{name}.*.png"):
        if old != path:
            old.unlink(missing_ok=True)
    return png


def markdown_image(png: bytes, alt: str) -> str:
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode('ascii')})"


def _cos_degrees(degrees: float) -> float:
    import math

    return math.cos(math.radians(degrees))

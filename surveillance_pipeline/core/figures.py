"""Small figures for the UI: a species' points on a map, a histogram; PNG bytes, and the markdown that
embeds them in Dagster metadata (as Dagster's docs embed plots: a data URI in markdown metadata).

Each figure is stored in Dagster's event log with its materialization, so they are small: about 3 to 6 kB
at 288 x 216 pixels in 64 colours. They are drawn with Pillow alone: a frame, ticks, labels and filled
rectangles are all a thumbnail needs. (matplotlib drew them once, at 120-160 ms a figure, most of
it laying out its axes: 22 s of a first run over a 1M-record download, for 142 figures; Pillow draws one
in a few ms.) The same input draws the same bytes: no timestamp is written, the font is the one Pillow
ships, and every coordinate is rounded the same way on every machine.
"""

from __future__ import annotations

import base64
import io
import math
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    from PIL import Image, ImageDraw, ImageFont

WIDTH, HEIGHT = 288, 216
# The plotting area inside the figure, in pixels: room on the left and below for the ticks and labels.
PLOT_LEFT, PLOT_TOP, PLOT_RIGHT, PLOT_BOTTOM = 50, 24, 278, 180
PALETTE_COLOURS = 64
PNG_COMPRESS_LEVEL = 6
TITLE_SIZE, LABEL_SIZE, TICK_SIZE = 10, 9, 8
TICK_LENGTH = 3
MOST_TICKS = 5
BACKGROUND = (255, 255, 255)
INK = (38, 38, 38)
BAR_COLOUR = (31, 119, 180)
# A map cell's colour, from few records to many (darker where there are more): points between which the
# colour is interpolated on the cell's share of the largest count, on a log scale (counts are skewed).
MAP_RAMP = ((198, 219, 239), (107, 174, 214), (33, 113, 181), (8, 48, 107))
NO_POINT = "no point"
# A flagged record's cell on a map (quality tests): red, apart from the blue ramp.
FLAGGED_COLOUR = (214, 39, 40)


def points_map_png(
    cells: Sequence[tuple[float, float, int]],
    title: str,
    cell_degrees: float,
    flagged: Sequence[tuple[float, float, int]] = (),
) -> bytes:
    """Points counted on a grid (cell centre longitude, latitude, count) as squares of ``cell_degrees``,
    darker where there are more; equal metres on both axes at the points' middle latitude.

    ``flagged``: cells of points drawn in FLAGGED_COLOUR over the others, within the others' extent (a
    record on another continent would shrink the species' range to a dot); none: the cells alone."""
    canvas = _Canvas(title, "longitude", "latitude")
    if not cells:
        canvas.centred_text(NO_POINT)
        return canvas.png()
    half = cell_degrees / 2
    west = min(cell[0] for cell in cells) - half
    east = max(cell[0] for cell in cells) + half
    south = min(cell[1] for cell in cells) - half
    north = max(cell[1] for cell in cells) + half
    # Degrees of longitude shrink with latitude: widen whichever range leaves the plot unfilled.
    shrink = max(0.2, math.cos(math.radians((south + north) / 2)))
    x_range, y_range = _fill_aspect(
        (west, east), (south, north), shrink, canvas.plot_width, canvas.plot_height
    )
    axes = canvas.axes(x_range, y_range)
    canvas.fill_cells(axes, cells, half)
    for longitude, latitude, _ in sorted(flagged):
        if x_range[0] <= longitude <= x_range[1] and y_range[0] <= latitude <= y_range[1]:
            axes.fill(longitude - half, latitude - half, longitude + half, latitude + half, FLAGGED_COLOUR)
    return canvas.png()


def histogram_png(edges: Sequence[float], counts: Sequence[int], xlabel: str, title: str) -> bytes:
    """Bars of ``counts`` between consecutive ``edges``."""
    canvas = _Canvas(title, xlabel, "records")
    top = max([*counts, 1]) * 1.05
    axes = canvas.axes((edges[0], edges[-1]), (0.0, top), integer_y=True)
    for left, right, count in zip(edges[:-1], edges[1:], counts, strict=True):
        if count > 0:
            axes.fill(left, 0.0, right, count, BAR_COLOUR, gap=1)
    return canvas.png()


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


def nice_ticks(low: float, high: float, most: int = MOST_TICKS) -> list[float]:
    """At most ``most`` round values (steps of 1, 2, 2.5 or 5 times a power of ten) within [low, high]."""
    if not high > low:
        return [low]
    power = 10.0 ** math.floor(math.log10((high - low) / most))
    for multiple in (1, 2, 2.5, 5, 10, 20, 25, 50):
        step = multiple * power
        first, last = math.ceil(low / step - 1e-9), math.floor(high / step + 1e-9)
        if last - first + 1 <= most:
            return [index * step for index in range(first, last + 1)]
    raise AssertionError("unreachable: a step of twenty powers of ten leaves at most `most` ticks")


def tick_label(value: float, ticks: Sequence[float]) -> str:
    """``value`` with as many decimals as the ticks' step needs (none for whole steps)."""
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    decimals = 0
    while decimals < 6 and abs(round(step, decimals) - step) > step * 1e-6:
        decimals += 1
    text = f"{value:.{decimals}f}"
    return text.lstrip("-") if float(text) == 0 else text  # never "-0.0"


def _fill_aspect(
    x_range: tuple[float, float], y_range: tuple[float, float], x_shrink: float, width: int, height: int
) -> tuple[tuple[float, float], tuple[float, float]]:
    """The ranges widened about their middles so that one unit of y and ``1 / x_shrink`` units of x take
    the same number of pixels, filling a ``width`` x ``height`` plot."""
    x_span = (x_range[1] - x_range[0]) * x_shrink
    y_span = y_range[1] - y_range[0]
    if x_span * height > y_span * width:
        wanted = x_span * height / width
        middle = (y_range[0] + y_range[1]) / 2
        y_range = (middle - wanted / 2, middle + wanted / 2)
    else:
        wanted = y_span * width / height / x_shrink
        middle = (x_range[0] + x_range[1]) / 2
        x_range = (middle - wanted / 2, middle + wanted / 2)
    return x_range, y_range


def _ramp(shares: np.ndarray) -> np.ndarray:
    """MAP_RAMP's colour at each share (0 to 1), as rows of uint8 RGB."""
    import numpy as np

    stops = np.linspace(0.0, 1.0, len(MAP_RAMP))
    channels = [np.interp(shares, stops, [colour[c] for colour in MAP_RAMP]) for c in range(3)]
    return np.rint(np.stack(channels, axis=1)).astype(np.uint8)


# Each thread loads its own fonts: a FreeType face is not to be shared by threads drawing at once, and
# a step may compute partitions side by side (report_partitions).
_fonts = threading.local()


def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    from PIL import ImageFont

    loaded: dict[int, ImageFont.FreeTypeFont | ImageFont.ImageFont] = _fonts.__dict__.setdefault(
        "by_size", {}
    )
    if size not in loaded:
        loaded[size] = ImageFont.load_default(size=size)
    return loaded[size]


class _Axes:
    """Data coordinates mapped onto the plot's pixels (y up)."""

    def __init__(self, draw: ImageDraw.ImageDraw, x_range: tuple[float, float], y_range: tuple[float, float]):
        self._draw = draw
        self.x_range, self.y_range = x_range, y_range
        self._x_scale = (PLOT_RIGHT - PLOT_LEFT) / ((x_range[1] - x_range[0]) or 1.0)
        self._y_scale = (PLOT_BOTTOM - PLOT_TOP) / ((y_range[1] - y_range[0]) or 1.0)

    def x(self, value: float) -> int:
        return PLOT_LEFT + round((value - self.x_range[0]) * self._x_scale)

    def y(self, value: float) -> int:
        return PLOT_BOTTOM - round((value - self.y_range[0]) * self._y_scale)

    def xs(self, values: np.ndarray) -> np.ndarray:
        """``x`` of each value (numpy rounds halves to even, as ``round`` does)."""
        import numpy as np

        return PLOT_LEFT + np.rint((values - self.x_range[0]) * self._x_scale).astype(np.int64)

    def ys(self, values: np.ndarray) -> np.ndarray:
        import numpy as np

        return PLOT_BOTTOM - np.rint((values - self.y_range[0]) * self._y_scale).astype(np.int64)

    def fill(
        self, x0: float, y0: float, x1: float, y1: float, colour: tuple[int, int, int], gap: int = 0
    ) -> None:
        """A rectangle between two data corners, at least one pixel each way, clipped to the plot."""
        left, right = self.x(x0), self.x(x1)
        top, bottom = self.y(y1), self.y(y0)
        right = max(right - gap, left + 1)
        bottom = max(bottom, top + 1)
        left, top = max(left, PLOT_LEFT + 1), max(top, PLOT_TOP + 1)
        right, bottom = min(right, PLOT_RIGHT), min(bottom, PLOT_BOTTOM)
        if right > left and bottom > top:
            # Pillow's rectangle includes its last pixel: the cell ends one before the next begins.
            self._draw.rectangle((left, top, right - 1, bottom - 1), fill=colour)


class _Canvas:
    def __init__(self, title: str, xlabel: str, ylabel: str):
        from PIL import Image, ImageDraw

        self.image: Image.Image = Image.new("RGB", (WIDTH, HEIGHT), BACKGROUND)
        self.draw = ImageDraw.Draw(self.image)
        self.plot_width, self.plot_height = PLOT_RIGHT - PLOT_LEFT, PLOT_BOTTOM - PLOT_TOP
        self._text((WIDTH // 2, 4), title, TITLE_SIZE, anchor="ma")
        self._text(((PLOT_LEFT + PLOT_RIGHT) // 2, HEIGHT - 3), xlabel, LABEL_SIZE, anchor="md")
        self._vertical_text(3, (PLOT_TOP + PLOT_BOTTOM) // 2, ylabel, LABEL_SIZE)

    def axes(
        self, x_range: tuple[float, float], y_range: tuple[float, float], integer_y: bool = False
    ) -> _Axes:
        axes = _Axes(self.draw, x_range, y_range)
        x_ticks = nice_ticks(*x_range)
        for value in x_ticks:
            x = axes.x(value)
            self.draw.line((x, PLOT_BOTTOM, x, PLOT_BOTTOM + TICK_LENGTH), fill=INK)
            self._text((x, PLOT_BOTTOM + TICK_LENGTH + 1), tick_label(value, x_ticks), TICK_SIZE, anchor="ma")
        y_ticks = [v for v in nice_ticks(*y_range) if not integer_y or float(v).is_integer()]
        for value in y_ticks:
            y = axes.y(value)
            self.draw.line((PLOT_LEFT - TICK_LENGTH, y, PLOT_LEFT, y), fill=INK)
            label = tick_label(value, y_ticks) if not integer_y else f"{int(value):,}"
            self._text((PLOT_LEFT - TICK_LENGTH - 2, y), label, TICK_SIZE, anchor="rm")
        return axes

    def fill_cells(self, axes: _Axes, cells: Sequence[tuple[float, float, int]], half: float) -> None:
        """Each cell (centre longitude, latitude, count) as a square of side ``2 * half``, at least a pixel,
        coloured by its count; the fewest records first, so where cells share a pixel the busiest shows."""
        import numpy as np
        from PIL import Image

        grid = np.array(cells, dtype=np.float64).reshape(-1, 3)
        grid = grid[np.lexsort((grid[:, 1], grid[:, 0], grid[:, 2]))]
        longitude, latitude, count = grid[:, 0], grid[:, 1], grid[:, 2]
        largest = math.log1p(float(count.max()))
        colours = _ramp(np.log1p(count) / largest if largest > 0 else np.ones(len(count)))
        left = np.maximum(axes.xs(longitude - half), PLOT_LEFT + 1)
        right = np.minimum(np.maximum(axes.xs(longitude + half), left + 1), PLOT_RIGHT)
        top = np.maximum(axes.ys(latitude + half), PLOT_TOP + 1)
        bottom = np.minimum(np.maximum(axes.ys(latitude - half), top + 1), PLOT_BOTTOM)
        pixels = np.array(self.image)
        for x0, x1, y0, y1, colour in zip(
            left.tolist(), right.tolist(), top.tolist(), bottom.tolist(), colours, strict=True
        ):
            pixels[y0:y1, x0:x1] = colour
        self.image.paste(Image.fromarray(pixels))

    def centred_text(self, text: str) -> None:
        self._text(
            ((PLOT_LEFT + PLOT_RIGHT) // 2, (PLOT_TOP + PLOT_BOTTOM) // 2), text, LABEL_SIZE, anchor="mm"
        )

    def png(self) -> bytes:
        """The figure, framed, as a PNG of at most PALETTE_COLOURS colours (a third of the bytes: each is
        stored in the event log with every materialization that shows it)."""
        from PIL import Image

        self.draw.rectangle((PLOT_LEFT, PLOT_TOP, PLOT_RIGHT, PLOT_BOTTOM), outline=INK)
        palette = self.image.quantize(colors=PALETTE_COLOURS, method=Image.Quantize.MEDIANCUT)
        small = io.BytesIO()
        # zlib's default level. PIL's optimize (level 9) took 8.0 ms a map for 4,350 bytes, level 6 1.3 ms
        # for 4,621 (20 quality maps of the bench's 1M download, 2026-12-07): occurrence_quality draws a
        # map and a chart per species that changed.
        palette.save(small, format="PNG", compress_level=PNG_COMPRESS_LEVEL)
        return small.getvalue()

    def _text(self, at: tuple[int, int], text: str, size: int, anchor: str) -> None:
        self.draw.text(at, text, fill=INK, font=_font(size), anchor=anchor)

    def _vertical_text(self, left: int, middle: int, text: str, size: int) -> None:
        from PIL import Image, ImageDraw

        font = _font(size)
        left_edge, top_edge, right_edge, bottom_edge = (
            round(v) for v in self.draw.textbbox((0, 0), text, font=font)
        )
        box = (left_edge, top_edge, right_edge, bottom_edge)
        label = Image.new("RGB", (box[2] - box[0] + 2, box[3] - box[1] + 2), BACKGROUND)
        ImageDraw.Draw(label).text((1 - box[0], 1 - box[1]), text, fill=INK, font=font)
        turned = label.rotate(90, expand=True)
        self.image.paste(turned, (left, middle - turned.height // 2))


def bars_png(labels: Sequence[str], counts: Sequence[int], title: str, xlabel: str = "records") -> bytes:
    """One horizontal bar per label (in the order given), its count written at its end."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (WIDTH, HEIGHT), BACKGROUND)
    draw = ImageDraw.Draw(image)
    draw.text((WIDTH // 2, 4), title, fill=INK, font=_font(TITLE_SIZE), anchor="ma")
    draw.text((WIDTH // 2, HEIGHT - 3), xlabel, fill=INK, font=_font(LABEL_SIZE), anchor="md")
    left, right, top, bottom = 70, WIDTH - 36, PLOT_TOP, HEIGHT - 16
    rows = max(len(labels), 1)
    height = (bottom - top) / rows
    largest = max([*counts, 1])
    for index, (label, count) in enumerate(zip(labels, counts, strict=True)):
        y0 = top + round(index * height)
        y1 = top + round((index + 1) * height) - 1
        middle = (y0 + y1) // 2
        draw.text((left - 3, middle), label, fill=INK, font=_font(TICK_SIZE), anchor="rm")
        end = left + round((right - left) * count / largest)
        if count > 0:
            draw.rectangle((left, y0, max(end, left + 1), y1), fill=BAR_COLOUR)
        draw.text((max(end, left) + 3, middle), f"{count:,}", fill=INK, font=_font(TICK_SIZE), anchor="lm")
    draw.line((left, top, left, bottom), fill=INK)
    palette = image.quantize(colors=PALETTE_COLOURS, method=Image.Quantize.MEDIANCUT)
    small = io.BytesIO()
    palette.save(small, format="PNG", optimize=True)
    return small.getvalue()

"""The UI's small figures: drawn by Pillow, the same bytes for the same input, and showing what they say."""

import io

from PIL import Image

from surveillance_pipeline.core.figures import (
    HEIGHT,
    MAP_RAMP,
    PALETTE_COLOURS,
    PLOT_BOTTOM,
    PLOT_LEFT,
    PLOT_RIGHT,
    PLOT_TOP,
    WIDTH,
    histogram_png,
    kept_figure,
    nice_ticks,
    points_map_png,
    tick_label,
)

GRID = 0.05
# Two cells far apart: one with a single record, one with a thousand.
CELLS = [(145.0, -43.0, 1), (148.0, -41.0, 1000)]


def _image(png: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(png))
    image.load()
    return image


def _darkness(pixel: tuple[int, int, int]) -> int:
    return 3 * 255 - sum(pixel)


def test_a_map_is_a_small_palette_png_drawn_the_same_every_time():
    first = points_map_png(CELLS, "Species: 1,001 records with a point", GRID)
    again = points_map_png(list(reversed(CELLS)), "Species: 1,001 records with a point", GRID)
    assert first == again
    image = _image(first)
    assert image.size == (WIDTH, HEIGHT)
    assert image.mode == "P"
    assert len(image.getcolors(maxcolors=256) or []) <= PALETTE_COLOURS
    assert "Software" not in image.info  # no version or time that changes from run to run


def test_the_busier_cell_is_darker_and_each_lies_where_its_coordinates_say():
    image = _image(points_map_png(CELLS, "two cells", GRID)).convert("RGB")
    inside = [
        (x, y, image.getpixel((x, y)))
        for x in range(PLOT_LEFT + 1, PLOT_RIGHT)
        for y in range(PLOT_TOP + 1, PLOT_BOTTOM)
        if image.getpixel((x, y)) != (255, 255, 255)
    ]
    colours = {pixel for _, _, pixel in inside}
    assert len(colours) == 2
    quiet = min(colours, key=_darkness)
    busy = max(colours, key=_darkness)
    assert _darkness(busy) > _darkness(quiet)
    # The quiet cell is west and south (left and lower) of the busy one.
    quiet_x = [x for x, _, pixel in inside if pixel == quiet]
    busy_x = [x for x, _, pixel in inside if pixel == busy]
    quiet_y = [y for _, y, pixel in inside if pixel == quiet]
    busy_y = [y for _, y, pixel in inside if pixel == busy]
    assert max(quiet_x) < min(busy_x)
    assert min(quiet_y) > max(busy_y)
    assert busy == MAP_RAMP[-1]


def test_a_map_without_points_says_so():
    image = _image(points_map_png([], "nothing", GRID)).convert("RGB")
    assert image.size == (WIDTH, HEIGHT)
    middle = [
        image.getpixel((x, y))
        for x in range(PLOT_LEFT + 40, PLOT_RIGHT - 40)
        for y in range((PLOT_TOP + PLOT_BOTTOM) // 2 - 4, (PLOT_TOP + PLOT_BOTTOM) // 2 + 4)
    ]
    assert any(pixel != (255, 255, 255) for pixel in middle)  # the words "no point"


def test_histogram_bars_are_as_tall_as_their_counts():
    edges = [0.0, 100.0, 200.0]
    image = _image(histogram_png(edges, [10, 40], "displacement (m)", "moved")).convert("RGB")
    plot_width = PLOT_RIGHT - PLOT_LEFT

    def bar_height(x: int) -> int:
        return sum(
            1 for y in range(PLOT_TOP + 1, PLOT_BOTTOM) if image.getpixel((x, y)) not in ((255, 255, 255),)
        )

    short, tall = bar_height(PLOT_LEFT + plot_width // 4), bar_height(PLOT_LEFT + 3 * plot_width // 4)
    assert short > 0
    assert abs(tall / short - 4) < 0.2


def test_ticks_are_round_and_labelled_with_the_decimals_their_step_needs():
    assert nice_ticks(144.5, 148.6) == [145.0, 146.0, 147.0, 148.0]
    assert nice_ticks(-43.6, -40.6) == [-43.0, -42.0, -41.0]
    halves = nice_ticks(0.0, 10.0)
    assert halves == [0.0, 2.5, 5.0, 7.5, 10.0]
    assert [tick_label(value, halves) for value in halves] == ["0.0", "2.5", "5.0", "7.5", "10.0"]
    small = nice_ticks(-0.1, 0.1)
    assert [tick_label(value, small) for value in small] == ["-0.10", "-0.05", "0.00", "0.05", "0.10"]
    assert tick_label(-0.0, [0.0, 1.0]) == "0"  # never "-0"
    assert nice_ticks(3.0, 3.0) == [3.0]


def test_a_kept_figure_is_read_back_and_never_drawn_twice(tmp_path):
    drawn = []

    def draw() -> bytes:
        drawn.append(1)
        return points_map_png(CELLS, "kept", GRID)

    first = kept_figure(tmp_path, "devil", "a" * 64, draw)
    second = kept_figure(tmp_path, "devil", "a" * 64, draw)
    assert first == second
    assert len(drawn) == 1
    # A new key draws anew and removes the figure of the old one.
    kept_figure(tmp_path, "devil", "b" * 64, draw)
    assert len(drawn) == 2
    assert [path.name for path in tmp_path.iterdir()] == [f"devil.{'b' * 16}.png"]

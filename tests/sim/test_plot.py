"""``gctl sim run --plot``: the CDF it draws, and the SVG chart writer under it."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from gctl.sim.plot import jct_cdf
from gctl.sim.svg import WIDTH, Panel, Series, chart, log_ticks, nice_ticks, tick_label

NS = {"svg": "http://www.w3.org/2000/svg"}


def _points(line: ET.Element) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in (p.split(",") for p in line.attrib["points"].split())]


def test_the_cdf_steps_at_each_distinct_value_to_the_fraction_at_or_below_it() -> None:
    assert jct_cdf([40.0, 10.0, 20.0, 20.0]) == [(10.0, 0.25), (20.0, 0.75), (40.0, 1.0)]
    assert jct_cdf([7.0, 7.0, 7.0]) == [(7.0, 1.0)]
    assert jct_cdf([]) == []


def test_ticks_are_round_and_cover_the_range() -> None:
    assert nice_ticks(0.0, 1.0) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert nice_ticks(3.0, 97.0) == [20.0, 40.0, 60.0, 80.0]
    assert log_ticks(15.0, 2e6) == [10.0, 100.0, 1e3, 1e4, 1e5, 1e6, 1e7]
    assert log_ticks(100.0, 100.0) == [100.0, 1000.0]
    assert [tick_label(v) for v in (0.2, 20.0, 1500.0, 1e6, 2.5e9)] == [
        "0.2",
        "20",
        "1.5k",
        "1M",
        "2.5G",
    ]


def _panel(series: list[Series], **kw: bool) -> ET.Element:
    return ET.fromstring(chart([Panel("t", "x", "y", series, ident="p", **kw)]))


def test_each_series_is_one_titled_polyline_and_text_is_escaped() -> None:
    svg = ET.fromstring(
        chart([Panel("a <b> & c", "x", "y", [Series("one & two", [(0, 0), (1, 1)])])])
    )
    assert "a <b> & c" in [t.text for t in svg.iter("{http://www.w3.org/2000/svg}text")]
    (line,) = svg.findall(".//svg:polyline", NS)
    assert line.findtext("svg:title", namespaces=NS) == "one & two"


def test_a_step_series_holds_each_value_until_the_next_point() -> None:
    (line,) = _panel([Series("s", [(0.0, 0.0), (1.0, 1.0), (2.0, 0.5)], step=True)]).iter(
        "{http://www.w3.org/2000/svg}polyline"
    )
    xs, ys = zip(*_points(line), strict=True)
    # corners: (0,0) (1,0) (1,1) (2,1) (2,0.5)
    assert xs[0] < xs[1] == xs[2] < xs[3] == xs[4]
    assert ys[0] == ys[1] > ys[2] == ys[3] < ys[4]


def test_a_log_axis_spaces_decades_evenly() -> None:
    (line,) = _panel([Series("s", [(10.0, 0.0), (100.0, 1.0), (1000.0, 2.0)])], log_x=True).iter(
        "{http://www.w3.org/2000/svg}polyline"
    )
    (x0, _), (x1, _), (x2, _) = _points(line)
    assert x1 - x0 == pytest.approx(x2 - x1, abs=0.1)


def test_dense_series_are_thinned_to_a_few_points_per_pixel_column_keeping_the_extremes() -> None:
    n = 20_000
    points = [(float(i), float(i % 97)) for i in range(n)]
    reference = Series("extremes", [(0.0, 0.0), (n - 1.0, 96.0)])
    dense, ends = _panel([Series("s", points), reference]).iter(
        "{http://www.w3.org/2000/svg}polyline"
    )
    pixels = _points(dense)
    assert len(pixels) <= 4 * (WIDTH + 1)
    ys = {y for _, y in pixels}
    (x0, bottom), (x1, top) = _points(ends)
    assert min(ys) == top and max(ys) == bottom
    assert (pixels[0][0], pixels[-1][0]) == (x0, x1)


def test_the_same_input_gives_the_same_bytes() -> None:
    series = [Series("a", [(1.0, 2.0), (3.0, 5.0)]), Series("b", [(2.0, 1.0)])]
    panels = [Panel("t", "x", "y", series), Panel("u", "x", "y", series, log_x=True)]
    assert chart(panels) == chart(list(panels))

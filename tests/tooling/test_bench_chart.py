"""bench/chart.py: the scaling benchmark's results as an SVG document."""

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from tests.support.bench_modules import load_bench_module

SVG = "{http://www.w3.org/2000/svg}"


chart = load_bench_module("chart")


def shape(processes: int, threads: int, rate: float) -> dict[str, Any]:
    return {
        "processes": processes,
        "threads": threads,
        "label": f"{processes}×{threads}",
        "drain_rate": rate,
        "peak_rss_mib": [40.5] * processes,
    }


@pytest.fixture
def results() -> dict[str, Any]:
    return {
        "bench": "scaling",
        "measured_at": "2026-12-01T12:00:00+00:00",
        "database_description": "PostgreSQL 15.18 (fsync=on)",
        "django_jobs": "0.1.0",
        "cpus": 2,
        "jobs": 20000,
        "shapes": [shape(1, 1, 500), shape(1, 4, 1000), shape(2, 4, 1500), shape(4, 4, 2000)],
    }


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg.encode())  # bytes: the document declares its encoding


def by_class(root: ET.Element, tag: str, name: str) -> list[ET.Element]:
    return [element for element in root.iter(SVG + tag) if element.get("class") == name]


def texts(root: ET.Element, name: str) -> list[str]:
    return [element.text or "" for element in by_class(root, "text", name)]


def test_chart_draws_one_bar_per_shape_with_its_label(results):
    root = parse(chart.render(results))

    assert root.tag == SVG + "svg"
    bars = by_class(root, "rect", "bar")
    assert [bar.get("data-shape") for bar in bars] == ["1×1", "1×4", "2×4", "4×4"]
    assert [bar.get("data-rate") for bar in bars] == ["500.0", "1000.0", "1500.0", "2000.0"]
    assert texts(root, "shape-label") == ["1×1", "1×4", "2×4", "4×4"]
    assert texts(root, "value") == ["500", "1,000", "1,500", "2,000"]
    tooltips = [bar.find(SVG + "title").text for bar in bars]
    assert tooltips[2] == "2×4: 1,500 jobs/s; peak RSS 40 MiB per process"


def test_chart_bars_are_as_tall_as_their_rates_and_stand_on_the_axis(results):
    bars = by_class(parse(chart.render(results)), "rect", "bar")

    heights = [float(bar.get("height", "0")) for bar in bars]
    assert heights[1] == pytest.approx(2 * heights[0], abs=0.2)
    assert heights[3] == pytest.approx(4 * heights[0], abs=0.2)
    bottoms = {round(float(bar.get("y", "0")) + float(bar.get("height", "0"))) for bar in bars}
    assert bottoms == {chart.HEIGHT - chart.BOTTOM}
    assert min(float(bar.get("y", "0")) for bar in bars) >= chart.TOP


def test_chart_puts_threads_and_processes_in_two_series(results):
    root = parse(chart.render(results))

    bars = by_class(root, "rect", "bar")
    assert [bar.get("data-series") for bar in bars] == [
        "threads",
        "threads",
        "processes",
        "processes",
    ]
    assert len({bar.get("fill") for bar in bars}) == 2
    assert texts(root, "series-label") == ["threads in one process", "processes × 4 threads"]
    lefts = [float(bar.get("x", "0")) for bar in bars]
    within, between = lefts[1] - lefts[0], lefts[2] - lefts[1]
    assert between > 1.5 * within  # a gap between the series


def test_chart_labels_the_axes_and_carries_a_title(results):
    root = parse(chart.render(results))

    assert texts(root, "title") == ["django-jobs: drain rate by threads and processes"]
    assert texts(root, "subtitle") == [
        "PostgreSQL 15.18 (fsync=on)",
        "django-jobs 0.1.0, 20,000 no-op jobs per shape, 2 cpus, 2026-12-01",
    ]
    assert "drain, jobs/s" in texts(root, "axis-title")
    assert texts(root, "tick") == ["0", "500", "1,000", "1,500", "2,000", "2,500"]


def test_chart_of_processes_with_mixed_threads_names_them_generally(results):
    results["shapes"] = [shape(1, 2, 10), shape(2, 2, 20), shape(4, 8, 30)]

    assert texts(parse(chart.render(results)), "series-label") == [
        "threads in one process",
        "processes × threads",
    ]


def test_chart_escapes_the_text_it_is_given(results):
    results["database_description"] = "SQLite <3.40> & co"

    assert texts(parse(chart.render(results)), "subtitle")[0] == "SQLite <3.40> & co"


def test_chart_without_shapes_is_an_error(results):
    results["shapes"] = []

    with pytest.raises(ValueError, match="no shapes"):
        chart.render(results)


@pytest.mark.parametrize(
    ("largest", "scale"),
    [(2000, (2500, 500)), (677, (800, 200)), (9.5, (12.5, 2.5)), (0, (1.0, 0.2))],
)
def test_chart_nice_scale_leaves_room_above_the_tallest_bar(largest, scale):
    assert chart.nice_scale(largest) == scale


def test_chart_main_writes_the_svg_file(results, tmp_path: Path):
    source = tmp_path / "results.json"
    source.write_text(json.dumps(results, ensure_ascii=False))
    target = tmp_path / "images" / "scaling.svg"

    assert chart.main([str(source), str(target)]) == 0

    assert len(by_class(parse(target.read_text(encoding="utf-8")), "rect", "bar")) == 4


def test_chart_main_reports_unreadable_results(tmp_path: Path, capsys):
    source = tmp_path / "results.json"
    source.write_text("{not json")
    target = tmp_path / "scaling.svg"

    assert chart.main([str(source), str(target)]) == 1

    assert capsys.readouterr().err.startswith("bench/chart.py: ")
    assert not target.exists()

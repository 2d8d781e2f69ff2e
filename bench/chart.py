#!/usr/bin/env python
"""Draw bench/scaling.py's results as an SVG bar chart, with the standard library only.

    python bench/chart.py results.json docs/images/scaling.svg

One bar per shape, drain rate in jobs per second up the y axis, the shapes
along the x axis in two series: threads in one process (1×1, 1×2, ...) and
several processes (2×4, 4×4, ...). Each bar carries its figure, and a tooltip
with the processes' peak resident memory. Other benches' results (bench/hosts.py)
name their own series (a shape's ``series``), title and x axis (``title``,
``x_title``).
"""

from __future__ import annotations

import json
import math
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import harness

SVG_NS = "http://www.w3.org/2000/svg"
WIDTH, HEIGHT = 900, 560
LEFT, RIGHT, TOP, BOTTOM = 90, 30, 100, 112
COLORS = {"threads": "#3b6ea8", "processes": "#d9822b"}
PALETTE = ["#3b6ea8", "#d9822b", "#4a9a5b", "#a8503b"]  # for series named in the results
TEXT = "#222222"
GRID = "#dddddd"
BAR_FRACTION = 0.62  # of a bar's slot; the rest is the gap between bars


def series_of(shape: dict[str, Any]) -> str:
    if shape.get("series"):
        return str(shape["series"])
    return "threads" if shape["processes"] == 1 else "processes"


def color_of(series: str, shapes: list[dict[str, Any]]) -> str:
    if series in COLORS:
        return COLORS[series]
    named = list(dict.fromkeys(series_of(shape) for shape in shapes))
    return PALETTE[named.index(series) % len(PALETTE)]


def series_caption(series: str, shapes: list[dict[str, Any]]) -> str:
    if series not in COLORS:
        return series
    if series == "threads":
        return "threads in one process"
    threads = {shape["threads"] for shape in shapes if series_of(shape) == series}
    return f"processes × {threads.pop()} threads" if len(threads) == 1 else "processes × threads"


def label_of(shape: dict[str, Any]) -> str:
    return str(shape.get("label") or f"{shape['processes']}×{shape['threads']}")


def nice_scale(largest: float, ticks: int = 5) -> tuple[float, float]:
    """(top of the axis, step between ticks): a 1, 2, 2.5 or 5 step, with room above ``largest``."""
    if largest <= 0:
        return 1.0, 0.2
    rough = largest * 1.12 / ticks
    power = 10 ** math.floor(math.log10(rough))
    step = next(power * f for f in (1, 2, 2.5, 5, 10) if power * f >= rough)
    return step * math.ceil(largest * 1.12 / step), step


def number(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 or value == int(value) else f"{value:,.1f}"


class Drawing:
    """An SVG document built with ElementTree, so that every text is escaped."""

    def __init__(self) -> None:
        ET.register_namespace("", SVG_NS)
        self.root = ET.Element(
            f"{{{SVG_NS}}}svg",
            {
                "width": str(WIDTH),
                "height": str(HEIGHT),
                "viewBox": f"0 0 {WIDTH} {HEIGHT}",
                "font-family": "DejaVu Sans, Helvetica, Arial, sans-serif",
            },
        )

    def add(self, tag: str, parent: ET.Element | None = None, **attributes: Any) -> ET.Element:
        # class_ is class, font_size is font-size, data_rate is data-rate, ...
        values = {
            name.rstrip("_").replace("_", "-"): str(value) for name, value in attributes.items()
        }
        return ET.SubElement(self.root if parent is None else parent, f"{{{SVG_NS}}}{tag}", values)

    def text(self, x: float, y: float, content: str, **attributes: Any) -> ET.Element:
        attributes.setdefault("fill", TEXT)
        element = self.add("text", x=f"{x:.1f}", y=f"{y:.1f}", **attributes)
        element.text = content
        return element

    def tostring(self) -> str:
        ET.indent(self.root)
        return ET.tostring(self.root, encoding="unicode", xml_declaration=True) + "\n"


def draw_frame(drawing: Drawing, data: dict[str, Any], top: float, step: float) -> None:
    """Title, subtitle, the y axis with its grid, and the axes' titles."""
    drawing.add("rect", width=WIDTH, height=HEIGHT, fill="#ffffff")
    title = str(data.get("title") or "django-jobs: drain rate by threads and processes")
    drawing.text(WIDTH / 2, 32, title, class_="title", text_anchor="middle", font_size=20)
    details = [
        f"django-jobs {data.get('django_jobs', '?')}, {data.get('jobs', 0):,} no-op jobs per shape",
        f"{data.get('cpus', '?')} cpus",
        str(data.get("measured_at", ""))[:10],
    ]
    for line_y, line in ((56, str(data.get("database_description", ""))), (74, ", ".join(details))):
        drawing.text(WIDTH / 2, line_y, line, class_="subtitle", text_anchor="middle", font_size=12)
    bottom, height = HEIGHT - BOTTOM, HEIGHT - TOP - BOTTOM
    for index in range(round(top / step) + 1):
        value = index * step
        y = bottom - height * value / top
        drawing.add("line", x1=LEFT, x2=WIDTH - RIGHT, y1=f"{y:.1f}", y2=f"{y:.1f}", stroke=GRID)
        drawing.text(LEFT - 8, y + 4, number(value), class_="tick", text_anchor="end", font_size=12)
    drawing.add("line", x1=LEFT, x2=LEFT, y1=TOP, y2=bottom, stroke=TEXT)
    drawing.add("line", x1=LEFT, x2=WIDTH - RIGHT, y1=bottom, y2=bottom, stroke=TEXT)
    middle = TOP + height / 2
    drawing.text(
        24,
        middle,
        "drain, jobs/s",
        class_="axis-title",
        text_anchor="middle",
        font_size=14,
        transform=f"rotate(-90 24 {middle:.1f})",
    )
    drawing.text(
        LEFT + (WIDTH - LEFT - RIGHT) / 2,
        HEIGHT - 16,
        str(data.get("x_title") or "runjobs processes × handler threads (--workers) each"),
        class_="axis-title",
        text_anchor="middle",
        font_size=14,
    )


def slots(shapes: list[dict[str, Any]]) -> tuple[list[float], float]:
    """Each bar's centre x, and a slot's width: one slot per bar, an empty one between series."""
    positions, slot, previous = [], 0, None
    for shape in shapes:
        if previous is not None and series_of(shape) != previous:
            slot += 1
        positions.append(slot + 0.5)
        previous = series_of(shape)
        slot += 1
    width = (WIDTH - LEFT - RIGHT) / slot
    return [LEFT + position * width for position in positions], width


def draw_bars(drawing: Drawing, shapes: list[dict[str, Any]], top: float) -> None:
    centres, slot = slots(shapes)
    bar = BAR_FRACTION * slot
    bottom, height = HEIGHT - BOTTOM, HEIGHT - TOP - BOTTOM
    for shape, centre in zip(shapes, centres, strict=True):
        rate, label, series = float(shape["drain_rate"]), label_of(shape), series_of(shape)
        tall = height * rate / top
        rect = drawing.add(
            "rect",
            class_="bar",
            x=f"{centre - bar / 2:.1f}",
            y=f"{bottom - tall:.1f}",
            width=f"{bar:.1f}",
            height=f"{tall:.1f}",
            fill=color_of(series, shapes),
            data_shape=label,
            data_series=series,
            data_rate=f"{rate:.1f}",
        )
        tooltip = f"{label}: {number(rate)} jobs/s"
        if shape.get("peak_rss_mib"):
            tooltip += f"; peak RSS {max(shape['peak_rss_mib']):.0f} MiB per process"
        drawing.add("title", rect).text = tooltip
        drawing.text(
            centre,
            bottom - tall - 6,
            number(rate),
            class_="value",
            text_anchor="middle",
            font_size=12,
        )
        drawing.text(
            centre, bottom + 20, label, class_="shape-label", text_anchor="middle", font_size=13
        )
    draw_captions(drawing, shapes, centres)


def draw_captions(drawing: Drawing, shapes: list[dict[str, Any]], centres: list[float]) -> None:
    """Each series' caption under its bars, in its colour."""
    groups: dict[str, list[float]] = {}
    for shape, centre in zip(shapes, centres, strict=True):
        groups.setdefault(series_of(shape), []).append(centre)
    for series, xs in groups.items():
        drawing.text(
            (xs[0] + xs[-1]) / 2,
            HEIGHT - BOTTOM + 46,
            series_caption(series, shapes),
            class_="series-label",
            text_anchor="middle",
            font_size=13,
            fill=color_of(series, shapes),
            font_weight="bold",
        )


def render(data: dict[str, Any]) -> str:
    """The SVG document for ``data`` (bench/scaling.py's JSON) as a string."""
    shapes = list(data.get("shapes") or [])
    if not shapes:
        raise ValueError("the results hold no shapes")
    top, step = nice_scale(max(float(shape["drain_rate"]) for shape in shapes))
    drawing = Drawing()
    draw_frame(drawing, data, top, step)
    draw_bars(drawing, shapes, top)
    return drawing.tostring()


def main(argv: list[str] | None = None) -> int:
    parser = harness.option_parser(__doc__)
    parser.add_argument("results", type=Path, help="bench/scaling.py --out's JSON file")
    parser.add_argument("svg", type=Path, help="the SVG file to write")
    args = parser.parse_args(argv)
    try:
        svg = render(json.loads(args.results.read_text()))
    except (OSError, ValueError, KeyError) as exc:
        print(f"bench/chart.py: {exc}", file=sys.stderr)
        return 1
    args.svg.parent.mkdir(parents=True, exist_ok=True)
    args.svg.write_text(svg, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""bench/scaling.py's pure parts: the shapes it is given and the table it prints."""

import pytest

from tests.support.bench_modules import load_bench_module

scaling = load_bench_module("scaling")


def test_scaling_shapes_parse_processes_by_threads():
    shapes = scaling.parse_shapes("1x1, 1×16,4x4")

    assert [(shape.processes, shape.threads) for shape in shapes] == [(1, 1), (1, 16), (4, 4)]
    assert [shape.label for shape in shapes] == ["1×1", "1×16", "4×4"]


@pytest.mark.parametrize("text", ["4", "2x", "x2", "0x4", "2x0", "2x4x1", "two x4", ""])
def test_scaling_shapes_refuse_what_is_not_processes_by_threads(text):
    with pytest.raises(ValueError, match="shape"):
        scaling.parse_shapes(text)


def test_scaling_options_default_to_the_database_s_shapes():
    postgresql = scaling.parse_options([])
    sqlite = scaling.parse_options(["--database", "sqlite-wal", "--jobs", "5000"])

    assert [shape.label for shape in postgresql.shapes] == [
        "1×1",
        "1×2",
        "1×4",
        "1×8",
        "1×16",
        "2×4",
        "4×4",
    ]
    assert postgresql.jobs == 20_000
    assert [shape.label for shape in sqlite.shapes] == ["1×1", "1×2", "1×4", "2×2"]
    assert sqlite.jobs == 5000


def test_scaling_options_refuse_a_bad_shape_with_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        scaling.parse_options(["--shapes", "1x1,banana"])

    assert exit_info.value.code == 2
    assert "a shape is PROCESSESxTHREADS, such as 2x4, not 'banana'" in capsys.readouterr().err


def test_scaling_table_shows_each_shape_s_figures():
    result = scaling.ShapeResult(2, 4, "2×4", 20_000, drain_rate=1234.5, drain_seconds=16.2)
    result.peak_rss_mib = [41.2, 43.0]
    result.cpu_seconds = [10.0, 12.0]
    result.peak_connections = 12

    header, row = scaling.format_table([result]).splitlines()

    assert header.split()[:3] == ["shape", "drain", "jobs/s"]
    assert row.split() == ["2×4", "1,234", "16.20", "0.00", "0.00", "41,", "43", "1.10", "12"]

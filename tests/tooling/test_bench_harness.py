"""bench/harness.py's pure parts: the tables, the run's description and the options' checks."""

import argparse
import sqlite3

import pytest

from tests.support.bench_modules import load_bench_module

harness = load_bench_module("harness")

COLUMNS = [("system", 8), ("jobs/s", 8), ("p90", 7)]


def test_bench_harness_table_puts_the_first_column_left_and_the_figures_right() -> None:
    table = harness.format_table(COLUMNS, [["a", "1,000", "5 ms"], ["longer", "12", "-"]])

    assert table.splitlines() == [
        "system    jobs/s    p90",
        "a          1,000   5 ms",
        "longer        12      -",
    ]


def test_bench_harness_table_aligns_each_column_as_told_without_trailing_blanks() -> None:
    left = harness.format_table(COLUMNS, [["a", "1", "2"]], align="<<<")
    right = harness.format_table(COLUMNS, [["a", "1", "2"]], align=">>>")

    assert left.splitlines() == ["system  jobs/s  p90", "a       1       2"]
    assert right.splitlines() == ["  system  jobs/s    p90", "       a       1      2"]


def test_bench_harness_table_never_cuts_a_cell_and_appends_what_follows_the_columns() -> None:
    table = harness.format_table(COLUMNS, [["a-long-label", "1", "2", "SLOW"], ["b", "1", "2"]])

    assert table.splitlines()[1:] == ["a-long-label       1      2 SLOW", "b              1      2"]


def test_bench_harness_table_refuses_an_alignment_for_other_columns() -> None:
    with pytest.raises(ValueError, match="3 columns"):
        harness.format_table(COLUMNS, [], align="<>")


def test_bench_harness_software_line_names_the_versions_and_the_cores() -> None:
    info = {"python": "3.11.7", "django": "5.2.19", "django_jobs": "0.1.0", "cpus": 2}

    assert harness.software_line(info) == "python 3.11.7, django 5.2.19, django-jobs 0.1.0, 2 cpus"


def test_bench_harness_settings_read_as_name_equals_value() -> None:
    settings = {"fsync": "on", "synchronous_commit": "off"}

    assert harness.format_settings(settings) == "fsync=on, synchronous_commit=off"
    assert harness.short_version("15.18 (Debian 15.18-0+deb12u1)") == "15.18"


def test_bench_harness_describes_a_sqlite_connection_with_synchronous_by_name() -> None:
    connection = sqlite3.connect(":memory:")
    try:
        connection.execute("PRAGMA synchronous=NORMAL")
        described = harness.describe_sqlite(connection.cursor())
        settings = harness.sqlite_settings(connection.cursor())
    finally:
        connection.close()

    assert described == f"SQLite {sqlite3.sqlite_version} (journal_mode=memory, synchronous=NORMAL)"
    assert settings == {
        "version": sqlite3.sqlite_version,
        "journal_mode": "memory",
        "synchronous": "1",
    }


def test_bench_harness_run_info_opens_with_the_bench_and_its_database(monkeypatch) -> None:
    software = {"python": "3.11.7", "django": "5.2.19", "django_jobs": "0.1.0", "cpus": 2}
    monkeypatch.setattr(harness, "software", lambda: software)
    monkeypatch.setattr(harness, "measured_at", lambda: "2026-12-01T12:00:00+00:00")

    info = harness.run_info("scaling", {"database": "PostgreSQL 15.18"}, {"jobs": 10})

    assert list(info) == ["bench", "measured_at", "database", *software, "jobs"]
    assert info["measured_at"] == "2026-12-01T12:00:00+00:00"


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (["jobs"], "--jobs must be at least 1"),
        (["jobs", "batch"], "--jobs and --batch must be at least 1"),
        (
            ["jobs", "batch", "max_attempts"],
            "--jobs, --batch and --max-attempts must be at least 1",
        ),
    ],
)
def test_bench_harness_names_the_options_that_must_be_at_least_one(
    names: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=10)
    harness.add_batch_option(parser)
    parser.add_argument("--max-attempts", type=int, default=1)
    harness.require_at_least_one(parser, parser.parse_args([]), *names)

    with pytest.raises(SystemExit) as exit_info:
        harness.require_at_least_one(parser, parser.parse_args(["--jobs", "0"]), *names)

    assert exit_info.value.code == 2
    assert capsys.readouterr().err.endswith(f"error: {message}\n")


def test_bench_harness_keeps_a_server_url_and_gives_sqlite_a_file_of_its_own(tmp_path) -> None:
    server = "postgres://bench@127.0.0.1:5433/bench"

    assert harness.temporary_sqlite_url(server, tmp_path) == server
    assert harness.temporary_sqlite_url("", tmp_path) == f"sqlite:///{tmp_path}/bench.sqlite3"
    assert harness.temporary_sqlite_url("sqlite:////elsewhere.sqlite3?timeout=5", tmp_path) == (
        f"sqlite:///{tmp_path}/bench.sqlite3?timeout=5"
    )

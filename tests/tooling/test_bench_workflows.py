"""bench/workflows.py's pure parts: its options, the chain's gaps and the table it prints."""

import pytest

from tests.support.bench_modules import load_bench_module

workflows = load_bench_module("workflows")


def test_workflows_options_poll_once_a_second_where_listen_wakes_the_workers():
    postgresql = workflows.parse_options([])
    sqlite = workflows.parse_options(["--database", "sqlite-wal", "--only", "chain"])

    assert (postgresql.jobs, postgresql.chain, postgresql.rounds) == (10_000, 1_000, 3)
    assert (postgresql.poll, sqlite.poll, sqlite.only) == (1.0, 0.05, "chain")
    assert workflows.parse_options(["--database", "mariadb", "--poll", "0.2"]).poll == 0.2


def test_workflows_options_refuse_an_empty_chain(capsys):
    with pytest.raises(SystemExit) as exit_info:
        workflows.parse_options(["--chain", "0"])

    assert exit_info.value.code == 2
    assert "must be at least 1" in capsys.readouterr().err


def test_workflows_gap_line_gives_the_median_p95_and_max_in_ms():
    gaps = [n / 1000 for n in range(1, 21)]  # 1 to 20 ms

    line = workflows.gap_line(gaps)

    assert line.endswith("20 gaps: median 10.5 ms, p95 19.0 ms, max 20.0 ms")


def test_workflows_table_gives_each_shape_s_median_rate_and_rounds():
    result = workflows.Result("fan-out", 10_000, seconds=[5.0, 4.0, 8.0])

    [row] = workflows.rows([result])

    assert row == ["fan-out", "10,000", "5.00", "2,000", "  5.00, 4.00, 8.00"]

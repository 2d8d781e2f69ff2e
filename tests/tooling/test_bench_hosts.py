"""bench/hosts.py's pure parts: its options, and where each host reaches the database."""

from pathlib import Path

import pytest

from tests.support.bench_modules import load_bench_module

hosts = load_bench_module("hosts")

REQUIRED = ["--pg-dir", "/tmp/pg", "--pg-url", "postgres://postgres@127.0.0.1:5432/jobs"]


def test_bench_hosts_options_default_to_one_two_four_and_eight_hosts():
    options = hosts.parse_options(REQUIRED)
    assert (options.hosts, options.threads, options.jobs) == ([1, 2, 4, 8], 2, 20_000)
    assert options.pg_dir == Path("/tmp/pg") and options.pgbouncer_dir is None
    assert hosts.parse_options([*REQUIRED, "--hosts", "4,1,4"]).hosts == [1, 4]


@pytest.mark.parametrize("given", ["0", "a,b", "33"])
def test_bench_hosts_refuses_a_number_of_hosts_it_cannot_make(given, capsys):
    with pytest.raises(SystemExit):
        hosts.parse_options([*REQUIRED, "--hosts", given])
    assert "--hosts" in capsys.readouterr().err


def test_bench_hosts_a_host_reaches_the_server_and_the_pooler_over_its_link():
    url = "postgres://postgres@127.0.0.1:5432/jobs"
    assert hosts.reached_at(url, "198.18.3.1") == "postgres://postgres@198.18.3.1:5432/jobs"
    assert hosts.reached_at("postgres://127.0.0.1:6432/jobs", "198.18.3.5") == (
        "postgres://198.18.3.5:6432/jobs"
    )

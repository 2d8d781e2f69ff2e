"""bench/settle_plan.py's pure parts: its options, what it reads of a plan, its table."""

import pytest

from tests.support.bench_modules import load_bench_module

settle_plan = load_bench_module("settle_plan")


def scan(node_type, rows, loops=1, index=None, removed=0, table="django_jobs_job"):
    node = {"Node Type": node_type, "Relation Name": table, "Actual Rows": rows}
    node |= {"Actual Loops": loops, "Rows Removed by Filter": removed}
    return node | ({"Index Name": index} if index else {})


def update(*children):
    """The settle's shape: the UPDATE of the jobs table (a write, not a read) over a join."""
    join = {"Node Type": "Hash Join", "Plans": list(children)}
    return {"Node Type": "ModifyTable", "Relation Name": "django_jobs_job", "Plans": [join]}


def test_bench_settle_plan_options_default_to_three_counts_of_running_jobs() -> None:
    options = settle_plan.parse_options([])

    assert (options.running, options.batch, options.repeat) == ([2000, 5000, 50000], 16, 5)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--batch", "0"], "--batch must be at least 1"),
        (["--repeat", "0"], "--repeat must be at least 1"),
        (["--running", "-1"], "--running must not be negative"),
    ],
)
def test_bench_settle_plan_options_refuse_what_cannot_be_measured(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        settle_plan.parse_options(argv)

    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_bench_settle_plan_counts_the_rows_a_filter_threw_away_as_read() -> None:
    whole_index = scan("Index Scan", 16, index="django_jobs_lease_idx", removed=2000)

    read = settle_plan.access(update({"Node Type": "Function Scan"}, whole_index))

    assert read == settle_plan.Access("Index Scan django_jobs_lease_idx", 2016)


def test_bench_settle_plan_counts_each_loop_of_a_probe() -> None:
    probes = scan("Index Scan", 1, loops=16, index="django_jobs_job_pkey")
    other_table = scan("Seq Scan", 16, table="django_jobs_attempt")

    read = settle_plan.access(update(probes, other_table))

    assert read == settle_plan.Access("Index Scan django_jobs_job_pkey", 16)


def test_bench_settle_plan_names_a_scan_of_the_table_and_nothing_when_unread() -> None:
    assert settle_plan.access(update(scan("Seq Scan", 16, removed=5000))).read_by == "Seq Scan"
    assert settle_plan.access(update()) == settle_plan.Access("-", 0)


def test_bench_settle_plan_table_lines_up_its_columns() -> None:
    result = settle_plan.Result(5000, "stale", "Index Scan django_jobs_lease_idx", 5016, 102, 4.9)

    header, line = settle_plan.table([result]).splitlines()

    assert line.split() == ["5,000", "stale", "Index", "Scan", "django_jobs_lease_idx"] + [
        "5,016",
        "102",
        "4.90",
    ]
    assert header.index("rows read") < line.index("5,016") + len("5,016") <= len(header)

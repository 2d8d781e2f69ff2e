"""bench/enqueue.py's pure parts: its options and the table it prints."""

import pytest

from tests.support.bench_modules import load_bench_module

enqueue = load_bench_module("enqueue")


def test_bench_enqueue_table_gives_each_way_its_ratio_to_schedule_job():
    times = {
        "schedule_job()": [(0.002, 0.001), (0.001, 0.0005), (0.003, 0.002)],
        "task.enqueue() (JobsBackend)": [(0.003, 0.0012)] * 3,
    }
    title, header, base, task = enqueue.table(times, "title")
    assert title == "title"
    assert header.split() == ["way", "us/call", "calls/s", "ratio", "CPU", "us/call"]
    assert base.split()[-4:] == ["2000", "500", "1.00", "1000"]
    assert task.split()[-4:] == ["3000", "333", "1.50", "1200"]


def test_bench_enqueue_refuses_no_rounds():
    with pytest.raises(SystemExit):
        enqueue.parse_options(["--rounds", "0"])
    assert enqueue.parse_options([]) == enqueue.Options(jobs=2000, rounds=5, batch=0)


def test_bench_enqueue_table_gives_schedule_job_against_the_raw_insert():
    times = {
        "schedule_job()": [(0.0013, 0.001)],
        enqueue.RAW: [(0.001, 0.0002)],
    }
    *_, raw, line = enqueue.table(times, "title")
    assert raw.split()[-4:] == ["1000", "1,000", "0.77", "200"]
    assert line == "schedule_job(): 1.30x the raw INSERT's time per call"


def test_bench_enqueue_table_gives_the_bulk_way_as_a_share_of_the_raw_rate():
    times = {enqueue.BULK: [(20e-6, 11e-6)], enqueue.RAW_BULK: [(15e-6, 6e-6)]}
    title, header, bulk, raw, line = enqueue.table(times, "title")
    assert header.split() == ["way", "us/job", "jobs/s", "ratio", "CPU", "us/job"]
    assert bulk.split()[-4:] == ["20", "50,000", "1.00", "11"]
    assert line == "schedule_jobs(): 0.75 of the raw rate"


def test_bench_enqueue_refuses_a_batch_that_does_not_divide_the_jobs():
    with pytest.raises(SystemExit):
        enqueue.parse_options(["--jobs", "1000", "--batch", "300"])
    assert enqueue.parse_options(["--batch", "500"]).batch == 500

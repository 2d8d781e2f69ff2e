"""bench/drain.py's check of the drain's end: drained, and every job succeeded."""

import pytest

from django_jobs.models import JobStatus
from tests.support.bench_modules import load_bench_module

drain = load_bench_module("drain")

pytestmark = pytest.mark.django_db


def test_bench_drain_is_drained_once_no_job_is_pending_or_running(make_job) -> None:
    pending = make_job()
    running = make_job(status=JobStatus.RUNNING)
    make_job(status=JobStatus.SUCCEEDED)
    assert not drain.is_drained()
    pending.delete()
    assert not drain.is_drained()
    running.delete()
    assert drain.is_drained()
    drain.check_all_succeeded(1)


def test_bench_drain_refuses_a_drain_where_a_job_did_not_succeed(make_job) -> None:
    make_job(status=JobStatus.SUCCEEDED)
    make_job(status=JobStatus.DEAD_LETTERED)
    assert drain.is_drained()
    with pytest.raises(drain.BenchError, match="did not all succeed"):
        drain.check_all_succeeded(2)
    with pytest.raises(drain.BenchError, match="did not all succeed"):
        drain.check_all_succeeded(1)

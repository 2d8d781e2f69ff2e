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


def test_bench_drain_times_the_attempts_from_the_first_start_to_the_last_end(make_job) -> None:
    from datetime import timedelta

    from django_jobs.models import Attempt
    from tests.conftest import START

    with pytest.raises(drain.BenchError, match="no attempt"):
        drain.attempts_span()
    first, second = make_job(), make_job()
    Attempt.objects.create(job=first, number=1, owner="w", started_at=START, finished_at=START)
    Attempt.objects.create(
        job=second,
        number=1,
        owner="w",
        started_at=START + timedelta(seconds=1),
        finished_at=START + timedelta(seconds=2.5),
    )
    assert drain.attempts_span() == 2.5

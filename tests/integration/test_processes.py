from datetime import timedelta
from functools import partial

import pytest

from django_jobs.maintenance.workers import sweep_workers
from django_jobs.models import Job, WorkerProcess
from django_jobs.worker import Worker, serve
from django_jobs.worker.clock import DatabaseClock, SystemClock
from django_jobs.worker.processes import refresh_worker, register_worker
from tests.conftest import START, wait_until
from tests.support.threads import in_a_thread


@pytest.mark.django_db
def test_workers_register_refresh_and_are_swept_a_lease_after_their_last_beat():
    register_worker("h:1:a", ["default"], START, "default")
    register_worker("h:2:b", ["emails", "default"], START, "default")
    row = WorkerProcess.objects.get(id="h:2:b")
    assert row.queues == ["default", "emails"] and row.started_at == START
    refresh_worker("h:1:a", ["default"], START + timedelta(seconds=200), "default")
    assert sweep_workers(START + timedelta(seconds=300), lease_seconds=300) == 0
    assert sweep_workers(START + timedelta(seconds=301), lease_seconds=300) == 1
    assert list(WorkerProcess.objects.values_list("id", flat=True)) == ["h:1:a"]
    refresh_worker("h:2:b", ["default"], START + timedelta(seconds=400), "default")
    assert WorkerProcess.objects.filter(id="h:2:b").exists()  # registered again after a sweep


@pytest.mark.django_db
def test_maintenance_sweeps_long_gone_workers(worker, clock):
    register_worker("gone", ["default"], clock.now() - timedelta(hours=1), "default")
    register_worker("alive", ["default"], clock.now(), "default")
    worker().run_once()
    assert list(WorkerProcess.objects.values_list("id", flat=True)) == ["alive"]


@pytest.mark.django_db(transaction=True)
def test_running_worker_is_registered_until_it_stops(settings):
    settings.DJANGO_JOBS = {"POLL_SECONDS": 0.02}
    w = Worker(["default"], clock=SystemClock())
    with in_a_thread(partial(serve, w)):
        wait_until(lambda: WorkerProcess.objects.filter(id=w.owner).exists())
    assert not WorkerProcess.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_running_worker_reports_the_jobs_it_ran_with_its_heartbeat(settings, make_job):
    settings.DJANGO_JOBS = {"POLL_SECONDS": 0.02, "LEASE_SECONDS": 0.9}  # a beat: 0.3 s
    for _ in range(3):
        make_job()
    w = Worker(["default"], clock=SystemClock())
    with in_a_thread(partial(serve, w)):
        wait_until(lambda: WorkerProcess.objects.filter(id=w.owner, jobs_run=3).exists(), timeout=5)


class SkewedHostClock:
    """The host clock of a machine whose time is an hour fast."""

    def now(self):
        return SystemClock().now() + timedelta(hours=1)


@pytest.mark.database_clock  # SQLite's clock is the host's: no host is wrong against it
@pytest.mark.django_db
def test_database_clock_corrects_a_wrong_host_clock(make_job):
    clock = DatabaseClock(host=SkewedHostClock())
    assert abs((clock.now() - SystemClock().now()).total_seconds()) < 5
    assert abs(clock.offset + timedelta(hours=1)) < timedelta(seconds=5)


@pytest.mark.database_clock
@pytest.mark.django_db
def test_worker_with_a_fast_host_clock_does_not_take_a_live_lease(make_job, settings):
    settings.DJANGO_JOBS = {"LEASE_SECONDS": 30}
    job = make_job(run_at=SystemClock().now() - timedelta(seconds=5))
    honest = Worker(["default"], clock=DatabaseClock(), owner="honest")
    [claimed] = honest.claimer.claim("default", honest.clock.now(), 1)
    fast = Worker(["default"], clock=DatabaseClock(host=SkewedHostClock()), owner="fast")
    assert fast.run_once().reclaimed == 0  # an hour fast, yet it reads the database's time
    assert Job.objects.get(pk=job.pk).lease_owner == "honest"
    naive = Worker(["default"], clock=SkewedHostClock(), owner="naive")
    assert naive.run_once().reclaimed == 1  # what a host clock alone would do
    first = Job.objects.get(pk=claimed.id).attempts.get(number=1)
    assert (first.owner, first.outcome) == ("honest", "lease_expired")


@pytest.mark.django_db
def test_database_clock_reads_the_time_now_even_inside_a_long_transaction():
    import time

    from django.db import transaction

    with transaction.atomic():
        first = DatabaseClock().measure()
        time.sleep(0.3)
        second = DatabaseClock().measure()
    assert abs((second - first).total_seconds()) < 0.2

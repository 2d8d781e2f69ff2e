"""bench/peers/run_raw.py, the raw limits: the driver's statements sent again in plain loops.

The bench's numbers mean something only if its loops do the work django-jobs
does: these run them on a few jobs of the test database and read the rows.
"""

import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from django.db.models import Count

from django_jobs.db.notify import CHANNEL
from django_jobs.models import Attempt, AttemptOutcome, Job, JobStatus
from tests.conftest import ROOT
from tests.support.bench_modules import load_bench_module

pytestmark = pytest.mark.django_db(transaction=True)
raw_statements = load_bench_module("raw_statements")

JOBS, BATCH = 25, 10  # two full batches and a remainder


@pytest.fixture
def run_raw() -> ModuleType:
    """The driver module (it imports bench/peers/common.py by name, as when run)."""
    if str(ROOT / "bench" / "peers") not in sys.path:
        sys.path.append(str(ROOT / "bench" / "peers"))
    return load_bench_module("peers/run_raw")


@pytest.fixture
def raw(run_raw: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The raw system, its statements recorded, sending them on its own connection."""
    # It sets DEBUG and DJANGO_SETTINGS_MODULE in the environment, as a bench process of its
    # own: not for the rest of the session, whose runjobs subprocesses inherit it.
    for name in ("DEBUG", "DJANGO_SETTINGS_MODULE"):  # as they are now, after the test
        if name in os.environ:
            monkeypatch.setenv(name, os.environ[name])
        else:
            monkeypatch.delenv(name, raising=False)
    system = run_raw.Raw(connections="2", claim_limit=3)
    system.record(options(run_raw, tmp_path))
    with system.limit.replayer() as system.send:
        yield system


def options(run_raw: ModuleType, tmp_path: Path) -> Any:
    return run_raw.common.Options(
        jobs=JOBS, pickups=0, batch=BATCH, timeout=60, log_dir=tmp_path, result=tmp_path / "r"
    )


def statuses() -> dict[str, int]:
    return dict(Job.objects.values_list("status").annotate(count=Count("id")).order_by())


def test_bench_raw_recording_leaves_no_job(raw: Any) -> None:
    assert Job.objects.count() == 0
    assert raw.one  # what schedule_job() sent


def test_bench_raw_enqueues_send_what_schedule_job_and_schedule_jobs_send(
    raw: Any, run_raw: ModuleType, tmp_path: Path
) -> None:
    bench = options(run_raw, tmp_path)

    run_raw.common.enqueue_in_bulk(raw, bench)
    in_bulk = statuses()
    raw.delete_jobs()
    run_raw.common.enqueue_one_by_one(raw, bench)

    assert in_bulk == {JobStatus.PENDING: JOBS}
    assert statuses() == {JobStatus.PENDING: JOBS}
    assert set(Job.objects.values_list("name", "queue")) == {("demo.noop", "default")}


@pytest.mark.parametrize("connections", [1, 2])
def test_bench_raw_drain_settles_every_job_as_succeeded(
    raw: Any, run_raw: ModuleType, tmp_path: Path, connections: int
) -> None:
    run_raw.common.enqueue_one_by_one(raw, options(run_raw, tmp_path))

    start_up, seconds, claimed = raw.drain_threads(connections, timeout=60)

    assert claimed == JOBS
    assert start_up >= 0 and seconds > 0
    assert statuses() == {JobStatus.SUCCEEDED: JOBS}
    attempts = Attempt.objects.filter(outcome=AttemptOutcome.SUCCEEDED, finished_at__isnull=False)
    assert attempts.count() == JOBS
    assert not Job.objects.exclude(lease_owner=None).exists()


def test_bench_raw_drain_start_is_read_before_any_thread_claims(
    raw: Any, run_raw: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The main thread scheduled last after the start barrier: the drain's start-up is
    still counted from the barrier, never after the first claim."""
    main = threading.main_thread()

    class LateMainThread(threading.Barrier):
        def wait(self, timeout: float | None = None) -> int:
            index = super().wait(timeout)
            if threading.current_thread() is main:
                time.sleep(0.2)  # the drain threads claim meanwhile
            return index

    monkeypatch.setattr(run_raw.threading, "Barrier", LateMainThread)
    run_raw.common.enqueue_one_by_one(raw, options(run_raw, tmp_path))

    start_up, seconds, claimed = raw.drain_threads(1, timeout=60)

    assert claimed == JOBS
    assert 0 <= start_up < 0.2 and seconds > 0


def test_bench_raw_run_reports_a_drain_per_connection_count(
    run_raw: ModuleType, tmp_path: Path
) -> None:
    system = run_raw.Raw(connections="2,3", claim_limit=2)

    result = run_raw.run(system, options(run_raw, tmp_path))

    assert result.drain_rate > 0
    assert list(result.drains) == [system.limit.describe(3, 2)]
    assert result.one_by_one_rate > 0 and result.bulk_rate > 0
    assert Job.objects.count() == 0


@pytest.mark.listen_notify
def test_bench_raw_one_by_one_enqueue_notifies_as_schedule_job_does(raw: Any) -> None:
    with raw.limit.connect() as listening:
        listening.execute(f"LISTEN {CHANNEL}")

        raw.enqueue_one(0)

        notices = list(listening.notifies(timeout=5, stop_after=1))
    assert [(notice.channel, notice.payload) for notice in notices] == [(CHANNEL, "default")]


def test_bench_raw_records_what_a_statement_sends() -> None:
    from django.db import connection

    connection.ensure_connection()  # not a new connection's set-up statements (MariaDB's)
    with raw_statements.recording() as statements, connection.cursor() as cursor:
        cursor.execute("SELECT %s", [1])

    assert statements == [raw_statements.Statement("SELECT %s", [1])]
    with pytest.raises(raw_statements.BenchError, match="sent 2 statements"):
        raw_statements.only(statements * 2, "it")


@pytest.mark.parametrize("atomic", [False, True], ids=["autocommit", "atomic"])
def test_bench_enqueue_raw_insert_enqueues_as_schedule_job_does(atomic: bool) -> None:
    enqueue = load_bench_module("enqueue")

    times = enqueue.measure(enqueue.Options(jobs=5, rounds=2), atomic)  # it counts the jobs

    assert list(times) == [*enqueue.WAYS, enqueue.RAW]
    assert "schedule_job(unique_key=)" in times
    assert all(len(figures) == 2 for figures in times.values())
    assert Job.objects.count() == 0


def test_bench_enqueue_in_bulk_sends_again_what_a_bulk_call_sends() -> None:
    """schedule_jobs() in calls of 100 (on PostgreSQL, a COPY) beside the same calls sent
    again past Django; each round of each counts its jobs."""
    enqueue = load_bench_module("enqueue")

    times = enqueue.measure(enqueue.Options(jobs=200, rounds=2, batch=100), atomic=False)

    assert list(times) == [enqueue.BULK, enqueue.RAW_BULK]
    assert all(len(figures) == 2 for figures in times.values())
    assert Job.objects.count() == 0

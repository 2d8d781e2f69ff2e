"""The maintenance pass with rows edited by hand: every running row without a live lease."""

from contextlib import ExitStack
from datetime import timedelta

import pytest

from django_jobs.db import get_driver
from django_jobs.maintenance.rescuer import dead_letter_exhausted, reclaim_expired_leases
from django_jobs.models import Attempt, Job, JobStatus
from tests.conftest import START
from tests.support.plans import analyze, scans
from tests.support.triggers import refusing

pytestmark = pytest.mark.django_db

LONG_AGO = START - timedelta(hours=2)


def reclaim(now=START):
    return reclaim_expired_leases(now)


def running(**overrides):
    """A running row as an operator or an older version might leave it."""
    values = {
        "name": "tests.ok",
        "status": JobStatus.RUNNING,
        "run_at": LONG_AGO,
        "created_at": LONG_AGO,
        "attempt": 1,
        "attempts_used": 1,
        "max_attempts": 3,
    }
    values.update(overrides)
    return Job.objects.create(**values)


def crashed_worker_job(clock, worker):
    """A job claimed by a worker that then died: its lease has lapsed by ``START``."""
    job = Job.objects.create(name="tests.ok", run_at=LONG_AGO, created_at=LONG_AGO)
    [claimed] = worker(owner="crashed").claimer.claim("default", LONG_AGO, 1)
    assert claimed.id == job.pk
    return job


def test_reclaim_moves_past_a_batch_of_running_rows_without_an_owner(clock, worker):
    crashed = crashed_worker_job(clock, worker)
    ownerless = Job.objects.bulk_create(
        Job(
            name="tests.ok",
            status=JobStatus.RUNNING,
            run_at=LONG_AGO,
            created_at=LONG_AGO,
            attempt=1,
            attempts_used=1,
            lease_expires_at=LONG_AGO - timedelta(minutes=1),  # ahead of the crashed job
        )
        for _ in range(101)
    )
    assert reclaim() == 102
    crashed.refresh_from_db()
    assert (crashed.status, crashed.lease_owner, crashed.run_at) == ("pending", None, START)
    assert crashed.attempts.get().outcome == "lease_expired"
    assert not Job.objects.filter(pk__in=[job.pk for job in ownerless], status="running").exists()


def test_reclaim_takes_back_running_rows_with_no_lease_expiry(clock, worker):
    owned = running(lease_owner="gone-worker", lease_expires_at=None)
    Attempt.objects.create(job=owned, number=1, owner="gone-worker", started_at=LONG_AGO)
    bare = running(lease_owner=None, lease_expires_at=None, attempt=0, attempts_used=0)
    assert reclaim() == 2
    owned.refresh_from_db()
    bare.refresh_from_db()
    assert (owned.status, owned.lease_owner, owned.lease_expires_at) == ("pending", None, None)
    assert "no lease expiry" in owned.last_error
    assert owned.attempts.get().outcome == "lease_expired"
    assert (bare.status, bare.run_at) == ("pending", START)
    assert "no lease owner" in bare.last_error
    assert not bare.attempts.exists()  # a hand-made row without an attempt row
    result = worker(queues={"default": 2}).run_once()
    assert (result.claimed, result.succeeded) == (2, 2)
    assert sorted(Attempt.objects.values_list("job_id", "number", "outcome")) == [
        (owned.pk, 1, "lease_expired"),
        (owned.pk, 2, "succeeded"),
        (bare.pk, 1, "succeeded"),
    ]


def test_reclaim_takes_back_an_ownerless_row_whose_lease_has_not_ended():
    """No worker can renew a lease nobody holds: it is not live, whatever its expiry says."""
    job = running(lease_owner=None, lease_expires_at=START + timedelta(hours=1))
    assert reclaim() == 1
    job.refresh_from_db()
    assert job.status == "pending"


def test_reclaim_dead_letters_an_exhausted_row_without_a_lease():
    job = running(lease_owner=None, lease_expires_at=None, attempts_used=3, max_attempts=3)
    assert reclaim() == 1
    job.refresh_from_db()
    assert (job.status, job.finished_at) == ("dead_lettered", START)
    assert job.last_error.startswith("LeaseExpired")


def test_reclaim_leaves_live_leases_alone():
    live = running(lease_owner="alive", lease_expires_at=START + timedelta(seconds=1))
    assert reclaim() == 0
    live.refresh_from_db()
    assert (live.status, live.lease_owner) == ("running", "alive")


@pytest.mark.parametrize(
    ("read", "change"),
    [
        (
            {"lease_owner": "w1"},
            {"lease_owner": "w2", "lease_expires_at": START + timedelta(hours=1)},
        ),
        ({"lease_owner": "w1"}, {"lease_expires_at": START + timedelta(minutes=5)}),
        ({"lease_owner": "w1"}, {"attempt": 2}),
        ({"lease_owner": "w1"}, {"status": JobStatus.SUCCEEDED, "lease_owner": None}),
        (
            {"lease_owner": None},
            {"lease_owner": "w2", "lease_expires_at": START + timedelta(hours=1)},
        ),
        ({"lease_expires_at": None}, {"lease_expires_at": START + timedelta(minutes=5)}),
    ],
    ids=["claimed-again", "renewed", "next-attempt", "settled", "owner-set", "expiry-set"],
)
def test_reclaim_is_fenced_by_the_state_it_read(read, change):
    from django_jobs.maintenance.rescuer import reclaim_row, unleased_rows

    job = running(**{"lease_owner": "w1", "lease_expires_at": LONG_AGO, **read})
    [row] = unleased_rows(get_driver(), START, 10)
    Job.objects.filter(pk=job.pk).update(**change)
    assert reclaim_row(get_driver(), row, START) is False
    job.refresh_from_db()
    assert job.status == change.get("status", "running")


@pytest.mark.parametrize(
    ("change", "taken"),
    [
        ({"lease_owner": "w2", "lease_expires_at": START + timedelta(hours=1)}, False),
        ({"lease_expires_at": START + timedelta(minutes=5)}, False),
        ({"status": JobStatus.SUCCEEDED, "lease_owner": None}, False),
        ({"attempt": 2, "attempts_used": 2}, True),
    ],
    ids=["claimed-again", "renewed", "settled", "next-attempt-lapsed-too"],
)
def test_reclaim_batch_decides_from_the_state_under_its_lock(change, taken):
    from django_jobs.maintenance.rescuer import reclaim_rows, unleased_rows

    job = running(lease_owner="w1", lease_expires_at=LONG_AGO)
    Attempt.objects.create(job=job, number=2, owner="w1", started_at=LONG_AGO)
    [row] = unleased_rows(get_driver(), START, 10)
    Job.objects.filter(pk=job.pk).update(**change)
    assert reclaim_rows(get_driver(), [row], START) == ({job.pk} if taken else set())
    job.refresh_from_db()
    if not taken:
        assert job.status == change.get("status", "running")
        return
    # The end written is the second attempt's, as read under the lock, not the first's.
    assert (job.status, job.last_error) == (
        "pending",
        "LeaseExpired: worker w1 lost its lease on attempt 2",
    )
    assert Attempt.objects.get(job=job, number=2).outcome == "lease_expired"


def test_reclaim_takes_back_a_dead_workers_jobs_in_a_handful_of_statements(
    django_assert_max_num_queries,
):
    """One transaction for a batch, one UPDATE per set of columns: a killed worker's jobs
    come back within the maintenance pass's deadline on a busy server, not a transaction
    of six statements per job."""
    jobs = [running(lease_owner="gone", lease_expires_at=LONG_AGO) for _ in range(60)]
    for job in jobs:
        Attempt.objects.create(job=job, number=1, owner="gone", started_at=LONG_AGO)
    jobs.append(running(lease_owner=None, lease_expires_at=None, attempt=2, attempts_used=3))
    with django_assert_max_num_queries(12):
        assert reclaim() == len(jobs)
    assert Job.objects.filter(status=JobStatus.PENDING).count() == 60
    assert Job.objects.get(pk=jobs[-1].pk).status == JobStatus.DEAD_LETTERED
    assert set(Attempt.objects.values_list("outcome", flat=True)) == {"lease_expired"}


@pytest.fixture
def refuse_updates_of():
    """Make the database refuse updates of one job row, as a bad row might."""
    with ExitStack() as stack:

        def refuse(job_id: int) -> None:
            stack.enter_context(
                refusing(
                    "test_refuse_job_update", "UPDATE", "django_jobs_job", f"OLD.id = {int(job_id)}"
                )
            )

        yield refuse


@pytest.mark.django_db(transaction=True)
def test_reclaim_skips_a_row_it_cannot_write_and_takes_back_the_rest(refuse_updates_of, caplog):
    stuck = running(lease_owner=None, lease_expires_at=LONG_AGO)
    others = [running(lease_owner="gone", lease_expires_at=LONG_AGO) for _ in range(3)]
    refuse_updates_of(stuck.pk)
    with caplog.at_level("WARNING", logger="django_jobs.events"):
        assert reclaim_expired_leases(START, batch=1) == 3
    failed = [r.job_id for r in caplog.records if getattr(r, "event", "") == "job_reclaim_failed"]
    assert failed == [stuck.pk]
    statuses = dict(Job.objects.values_list("id", "status"))
    assert statuses == {stuck.pk: "running", **{job.pk: "pending" for job in others}}


def test_dead_letter_exhausted_clears_a_leftover_lease():
    job = Job.objects.create(
        name="tests.ok",
        run_at=LONG_AGO,
        attempt=3,
        attempts_used=3,
        max_attempts=3,
        lease_owner="gone-worker",
        lease_expires_at=LONG_AGO,
    )
    assert dead_letter_exhausted(START) == 1
    job.refresh_from_db()
    assert (job.status, job.finished_at) == ("dead_lettered", START)
    assert (job.lease_owner, job.lease_expires_at) == (None, None)


def test_reclaim_read_finds_running_rows_without_walking_the_table():
    from django_jobs.maintenance.rescuer import unleased_read

    Job.objects.bulk_create(
        Job(name="tests.ok", status=JobStatus.SUCCEEDED, run_at=START, created_at=START)
        for _ in range(3000)
    )
    for _ in range(5):
        running(lease_owner="w1", lease_expires_at=START + timedelta(minutes=5))
    running(lease_owner=None, lease_expires_at=None)
    analyze()
    plan = unleased_read(get_driver(), START, 100).explain()
    assert "PRIMARY KEY" not in plan and "PRIMARY " not in plan, plan
    assert not scans(plan, "django_jobs_job", whole_index=True), plan


@pytest.mark.skip_locked
@pytest.mark.django_db(transaction=True)
def test_reclaim_passes_a_row_another_session_holds_locked_instead_of_waiting():
    """A worker cut off mid-write leaves its transaction, and its row locks, on the server."""
    import time

    from django.db import connections

    locked = running(lease_owner="cut-off", lease_expires_at=LONG_AGO)
    others = [running(lease_owner="gone", lease_expires_at=LONG_AGO) for _ in range(2)]
    zombie = connections.create_connection("default")  # a session of its own
    try:
        zombie.set_autocommit(False)
        with zombie.cursor() as cursor:
            cursor.execute("SELECT 1 FROM django_jobs_job WHERE id = %s FOR UPDATE", [locked.pk])
        started = time.monotonic()
        assert reclaim() == 2
        assert time.monotonic() - started < 2  # no wait for the lock
        assert Job.objects.get(pk=locked.pk).status == JobStatus.RUNNING
    finally:
        zombie.close()  # the server ends the session: its locks go
    # ... in its own time: the session may still hold them as the close returns.
    deadline = time.monotonic() + 10
    while (taken := reclaim()) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert taken == 1
    assert {
        job.status for job in Job.objects.filter(pk__in=[locked.pk, *[o.pk for o in others]])
    } == {JobStatus.PENDING}


def test_maintenance_pass_prunes_finished_jobs_past_their_retention(worker, make_job, clock):
    old = make_job(status=JobStatus.SUCCEEDED, finished_at=START - timedelta(days=8))
    recent = make_job(status=JobStatus.SUCCEEDED, finished_at=START - timedelta(days=6))
    worker().maintainer.maintain(clock.now())
    assert set(Job.objects.values_list("id", flat=True)) == {recent.pk}
    assert not Job.objects.filter(pk=old.pk).exists()

from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_jobs import JobSpec, PayloadError, UnknownJob, schedule_job, schedule_jobs
from django_jobs.models import Job, JobStatus
from tests.support.jobs import emails, ok

pytestmark = pytest.mark.django_db


def test_schedule_job_by_name_uses_the_job_defaults():
    job = schedule_job("tests.emails", {"to": "a@example.com"})
    job.refresh_from_db()
    assert (job.name, job.queue, job.priority, job.max_attempts) == ("tests.emails", "emails", 5, 7)
    assert job.status == JobStatus.PENDING
    assert job.payload == {"to": "a@example.com"}
    assert job.attempts_used == 0


def test_schedule_job_by_function_with_overrides():
    job = schedule_job(emails, [1, 2], queue="other", priority=-1, max_attempts=2)
    job.refresh_from_db()
    assert (job.queue, job.priority, job.max_attempts, job.payload) == ("other", -1, 2, [1, 2])


def test_schedule_job_max_attempts_default_comes_from_settings(settings):
    settings.DJANGO_JOBS = {"MAX_ATTEMPTS": 11}
    assert schedule_job(ok).max_attempts == 11


@pytest.mark.parametrize("payload", [None, "text", 3, True, [1, {"a": None}]])
def test_schedule_job_any_json_value_round_trips(payload):
    job = schedule_job(ok, payload)
    assert Job.objects.get(pk=job.pk).payload == payload


def test_schedule_job_delay_and_run_at():
    before = timezone.now()
    delayed = schedule_job(ok, delay=timedelta(minutes=5))
    assert before + timedelta(minutes=5) <= delayed.run_at <= timezone.now() + timedelta(minutes=5)
    at = timezone.now() + timedelta(days=1)
    assert Job.objects.get(pk=schedule_job(ok, run_at=at).pk).run_at == at


def test_schedule_job_argument_errors():
    with pytest.raises(ValueError, match="not both"):
        schedule_job(ok, run_at=timezone.now(), delay=timedelta(1))
    with pytest.raises(ValueError, match="timezone-aware"):
        schedule_job(ok, run_at=datetime(2030, 1, 1))  # noqa: DTZ001
    with pytest.raises(UnknownJob, match="nope"):
        schedule_job("nope")
    with pytest.raises(PayloadError):
        schedule_job(ok, {"x": float("nan")})
    with pytest.raises(PayloadError):
        schedule_job(ok, {"x": "\x00"})
    assert not Job.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_schedule_job_in_a_rolled_back_transaction_never_exists():
    class Boom(Exception):
        pass

    with pytest.raises(Boom), transaction.atomic():
        schedule_job(ok, {"n": 1})
        schedule_job(ok, {"n": 2}, unique_key="k")
        raise Boom
    assert not Job.objects.exists()
    with transaction.atomic():
        schedule_job(ok, {"n": 3})
    assert Job.objects.count() == 1


def test_schedule_job_unique_key_returns_the_live_job():
    first = schedule_job(ok, {"n": 1}, unique_key="welcome-7")
    second = schedule_job(ok, {"n": 2}, unique_key="welcome-7")
    assert second.pk == first.pk
    assert Job.objects.count() == 1
    other_key = schedule_job(ok, unique_key="welcome-8")
    other_name = schedule_job(emails, unique_key="welcome-7")
    assert len({first.pk, other_key.pk, other_name.pk}) == 3


def test_schedule_job_unique_key_running_blocks_and_finished_does_not():
    first = schedule_job(ok, unique_key="k")
    Job.objects.filter(pk=first.pk).update(status=JobStatus.RUNNING)
    assert schedule_job(ok, unique_key="k").pk == first.pk
    Job.objects.filter(pk=first.pk).update(status=JobStatus.SUCCEEDED)
    fresh = schedule_job(ok, unique_key="k")
    assert fresh.pk != first.pk
    Job.objects.filter(pk=fresh.pk).update(status=JobStatus.DEAD_LETTERED)
    assert schedule_job(ok, unique_key="k").pk not in {first.pk, fresh.pk}


def test_unique_key_constraint_holds_against_a_direct_insert():
    from django.db import IntegrityError

    schedule_job(ok, unique_key="k")
    with pytest.raises(IntegrityError), transaction.atomic():
        Job.objects.create(name="tests.ok", unique_key="k")


def test_schedule_job_stores_every_field_of_the_row_it_returns():
    job = schedule_job(
        emails,
        {"a": [1, {"b": None}], "é": "ü 😀"},
        delay=timedelta(minutes=5),
        priority=3,
        max_attempts=4,
    )
    stored = Job.objects.get(pk=job.pk)
    for field in Job._meta.concrete_fields:
        assert getattr(stored, field.attname) == getattr(job, field.attname), field.name


#: Text that PostgreSQL's COPY format escapes, or reads as its own marks, and text beyond ASCII.
COPY_MARKS = ["tab\there", "line\nend", "carriage\rreturn", "back\\slash", "\\N", "\\.", "ü ✓ 😀"]


def test_schedule_jobs_in_bulk_stores_every_field_of_the_rows_it_returns():
    """Many rows at once (on PostgreSQL a ``COPY``, whose lines the driver formats) are
    stored as the rows returned: keys and payloads with the marks of COPY's format, a time
    with an offset and microseconds, options that differ among the rows."""
    from django_jobs.db.postgresql import COPY_ROWS

    run_at = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=dt_timezone(timedelta(hours=5.5)))
    texts = COPY_MARKS * (COPY_ROWS // len(COPY_MARKS) + 1)
    specs = [
        JobSpec(
            "tests.keyed",
            {"text": text, "n": n} if n % 2 else {"nested": [text, {"k": text}]},
            concurrency_key=text,
            run_at=run_at,
            priority=n % 3,
            max_attempts=n % 5 + 1,
        )
        for n, text in enumerate(texts)
    ]
    with CaptureQueriesContext(connection) as context:
        jobs = schedule_jobs(specs)
    if connection.vendor == "postgresql":
        assert any(q["sql"].startswith("COPY ") for q in context.captured_queries)
    stored = Job.objects.in_bulk([job.pk for job in jobs])
    for job in jobs:
        for field in Job._meta.concrete_fields:
            assert getattr(stored[job.pk], field.attname) == getattr(job, field.attname), field
    assert [job.payload for job in jobs] == [spec.payload for spec in specs]
    assert [stored[job.pk].concurrency_key for job in jobs] == texts


def test_schedule_jobs_inserts_many_in_one_statement():
    # 40 rows stay under SQLite's 999 parameters; Django splits a bigger batch.
    specs = [JobSpec(ok, {"n": n}) for n in range(40)]
    with CaptureQueriesContext(connection) as context:
        jobs = schedule_jobs(specs)
    inserts = [q for q in context.captured_queries if "INSERT" in q["sql"]]
    assert len(inserts) == 1
    assert [job.payload["n"] for job in jobs] == list(range(40))
    assert all(job.pk for job in jobs)
    assert Job.objects.count() == 40


def test_schedule_jobs_mixes_dicts_specs_and_unique_keys_in_order():
    existing = schedule_job(ok, unique_key="u")
    jobs = schedule_jobs(
        [{"job": "tests.ok", "payload": 1}, JobSpec(ok, 2, unique_key="u"), {"job": emails}]
    )
    assert jobs[1].pk == existing.pk
    assert jobs[0].payload == 1 and jobs[2].queue == "emails"
    assert Job.objects.count() == 3


def test_schedule_jobs_validates_everything_before_writing():
    with pytest.raises(PayloadError):
        schedule_jobs([JobSpec(ok, 1), JobSpec(ok, float("inf"))])
    assert not Job.objects.exists()


# Arguments no database can store: refused before any write, the same on every database,
# so that PostgreSQL never raises a DataError that would break the caller's transaction.
UNSTORABLE_ARGUMENTS = [
    {"max_attempts": 2**31},
    {"queue": "q\x00"},
    {"queue": "q\ud800"},
    {"unique_key": "k\x00"},
    {"unique_key": "k\udfff"},
    {"unique_key": "k" * 256},
    {"delay": timedelta.max},
    {"run_at": datetime.max.replace(tzinfo=dt_timezone(timedelta(hours=-5)))},
]


@pytest.mark.parametrize("arguments", UNSTORABLE_ARGUMENTS, ids=repr)
def test_schedule_job_refuses_what_no_database_stores_and_the_transaction_goes_on(arguments):
    with transaction.atomic():
        before = schedule_job(ok, {"n": 1})
        with pytest.raises(ValueError, match=f"^{next(iter(arguments))} "):
            schedule_job(ok, {"n": 2}, **arguments)
        with pytest.raises(ValueError, match=f"^{next(iter(arguments))} "):
            schedule_jobs([JobSpec(ok, {"n": 3}), JobSpec(ok, {"n": 4}, **arguments)])
        assert list(Job.objects.values_list("pk", flat=True)) == [before.pk]
        after = schedule_job(ok, {"n": 5})
    assert list(Job.objects.order_by("id").values_list("pk", flat=True)) == [before.pk, after.pk]


def test_schedule_job_stores_the_edges_of_every_limit():
    last = datetime.max.replace(tzinfo=dt_timezone.utc)
    row = schedule_job(
        ok, queue="q" * 100, max_attempts=2**31 - 1, unique_key="k" * 255, run_at=last
    )
    stored = Job.objects.get(pk=row.pk)
    assert (stored.queue, stored.max_attempts, stored.unique_key, stored.run_at) == (
        "q" * 100,
        2**31 - 1,
        "k" * 255,
        last,
    )


def test_schedule_jobs_carries_plain_keyed_and_unique_jobs_in_one_insert():
    held = schedule_job(ok, unique_key="held")
    specs = [
        JobSpec(ok, 1),
        JobSpec("tests.keyed_pairs", 2, concurrency_key="k"),
        JobSpec(ok, 3, unique_key="new"),
        JobSpec(ok, 4, unique_key="held"),  # a live job holds it: that job
        JobSpec(ok, 5, unique_key="new"),  # the row before holds it now
    ]
    with CaptureQueriesContext(connection) as context:
        jobs = schedule_jobs(specs)
    inserts = [q["sql"] for q in context.captured_queries if "INSERT" in q["sql"]]
    assert len(inserts) == 1, inserts
    assert jobs[3].pk == held.pk and jobs[4].pk == jobs[2].pk
    assert len({held.pk, jobs[0].pk, jobs[1].pk, jobs[2].pk}) == 4
    keyed = Job.objects.get(pk=jobs[1].pk)
    assert (keyed.concurrency_key, keyed.concurrency_limit, keyed.queue) == ("k", 2, "keyed")
    assert Job.objects.get(pk=jobs[2].pk).unique_key == "new"
    assert Job.objects.count() == 4


@pytest.mark.parametrize(
    "options",
    [{"unique_key": "u"}, {"concurrency_key": "k"}, {}],
    ids=["unique", "keyed", "keyed_by_its_name"],
)
def test_schedule_job_with_a_key_is_one_insert_by_the_drivers_insert(options, monkeypatch):
    from django_jobs.db import get_driver

    driver = type(get_driver("default"))
    inserted: list[list[Job]] = []
    insert_jobs = driver.insert_jobs

    def spy(self, rows, now):  # type: ignore[no-untyped-def]
        inserted.append(list(rows))
        return insert_jobs(self, rows, now)

    monkeypatch.setattr(driver, "insert_jobs", spy)
    with CaptureQueriesContext(connection) as context:
        job = schedule_job("tests.keyed_pairs", **options)
    statements = [q["sql"] for q in context.captured_queries if "SAVEPOINT" not in q["sql"]]
    assert len(statements) == 1 and "INSERT" in statements[0], statements
    assert inserted == [[job]]
    stored = Job.objects.get(pk=job.pk)
    assert (stored.unique_key, stored.concurrency_key) == (
        options.get("unique_key"),
        options.get("concurrency_key", "tests.keyed_pairs"),
    )


def unknown_queue_lines(caplog):
    return [r for r in caplog.records if getattr(r, "event", None) == "unknown_queue_scheduled"]


def test_schedule_job_onto_a_queue_named_nowhere_warns_once_with_the_closest(caplog):
    first = schedule_job("tests.ok", queue="emial")
    schedule_jobs([{"job": "tests.ok", "queue": "emial"}])
    [line] = unknown_queue_lines(caplog)
    assert line.levelname == "WARNING" and line.queue == "emial"
    assert line.getMessage() == (
        "queue 'emial' is not in DJANGO_JOBS['QUEUES'] and no registered job, schedule or "
        "task backend uses it (did you mean 'emails'?): scheduled anyway; only a worker "
        "started with --queue emial runs its jobs"
    )
    assert Job.objects.filter(queue="emial").count() == 2 and first.pk is not None


def test_schedule_job_onto_a_queue_the_project_names_says_nothing(settings, caplog):
    settings.DJANGO_JOBS = {
        **settings.DJANGO_JOBS,
        "RECURRING": {"nightly": {"cron": "0 2 * * *", "job": "tests.ok", "queue": "night"}},
    }
    schedule_job("tests.ok", queue="night")  # a schedule's queue
    schedule_job("tests.emails")  # its job's own queue
    schedule_job("tests.ok", queue="emails")  # another job's queue
    schedule_job("tests.ok", queue="default")  # in QUEUES
    assert unknown_queue_lines(caplog) == []


def test_schedule_job_onto_a_queue_named_nowhere_is_refused_when_the_setting_says(settings):
    settings.DJANGO_JOBS = {**settings.DJANGO_JOBS, "UNKNOWN_QUEUES": "error"}
    with pytest.raises(ValueError, match="queue 'emial' is not in .*did you mean 'emails'"):
        schedule_jobs([{"job": "tests.ok"}, {"job": "tests.ok", "queue": "emial"}])
    assert not Job.objects.exists()  # nothing of the call was written


def test_options_checked_once_are_still_refused_as_a_bool():
    """The options a call checked are remembered; True equals 1, but is no priority."""
    schedule_job("tests.ok", priority=1, max_attempts=1)
    with pytest.raises(ValueError, match="priority"):
        schedule_job("tests.ok", priority=True, max_attempts=1)
    with pytest.raises(ValueError, match="max_attempts"):
        schedule_job("tests.ok", priority=1, max_attempts=True)


def test_an_unsaved_job_is_the_same_with_or_without_a_receiver_of_its_init_signals():
    from django.db.models.signals import post_init

    from django_jobs.models import Job

    seen = []

    def receiver(sender, instance, **kwargs):
        seen.append(instance)

    quick = Job.unsaved(name="tests.ok", queue="q", payload={"a": 1}, created_at=None)
    post_init.connect(receiver, sender=Job)
    try:
        signalled = Job.unsaved(name="tests.ok", queue="q", payload={"a": 1}, created_at=None)
    finally:
        post_init.disconnect(receiver, sender=Job)
    assert seen == [signalled]
    fields = [f.attname for f in Job._meta.concrete_fields if f.attname != "run_at"]
    assert [getattr(quick, f) for f in fields] == [getattr(signalled, f) for f in fields]
    assert (quick._state.adding, quick._state.db) == (True, None)


def test_schedule_jobs_checks_specs_alike_once_but_still_refuses_a_bool_among_them():
    """Specs that differ only in their payload share one check of the rest; a spec whose
    priority is True where the one before has 1 is not one of them."""
    with pytest.raises(ValueError, match="priority"):
        schedule_jobs([JobSpec(ok, 1, priority=1), JobSpec(ok, 2, priority=True)])
    with pytest.raises(ValueError, match="max_attempts"):
        schedule_jobs([JobSpec(ok, 1, max_attempts=1), JobSpec(ok, 2, max_attempts=True)])
    assert not Job.objects.exists()


def test_schedule_jobs_gives_each_spec_its_own_options_and_its_own_payload():
    run_at = timezone.now() + timedelta(hours=1)
    payloads = [{"n": 1}, {"n": 2}, {"n": 3, "tag": "x"}, {"n": 4}]
    specs = [
        JobSpec(ok, payloads[0]),
        JobSpec(ok, payloads[1], priority=5, run_at=run_at),
        JobSpec(ok, payloads[2], queue="emails"),
        JobSpec(ok, payloads[3]),
    ]
    jobs = schedule_jobs(specs)
    assert [(job.queue, job.priority) for job in jobs] == [
        ("default", 0),
        ("default", 5),
        ("emails", 0),
        ("default", 0),
    ]
    assert jobs[1].run_at == run_at and jobs[0].run_at == jobs[3].run_at <= timezone.now()
    payloads[0]["n"] = 99  # the caller's dict changed after the call: the row's is its own
    jobs[3].payload["n"] = 98  # a row's payload changed: the other rows' are their own
    assert [job.payload for job in jobs] == [{"n": 1}, {"n": 2}, {"n": 3, "tag": "x"}, {"n": 98}]
    stored = Job.objects.order_by("id").values_list("payload", flat=True)
    assert list(stored) == [{"n": 1}, {"n": 2}, {"n": 3, "tag": "x"}, {"n": 4}]


def test_schedule_jobs_sends_the_init_signals_of_each_row_to_a_receiver():
    from django.db.models.signals import post_init

    seen = []

    def receiver(sender, instance, **kwargs):
        seen.append(instance)

    post_init.connect(receiver, sender=Job)
    try:
        jobs = schedule_jobs([JobSpec(ok, {"n": n}) for n in range(3)])
    finally:
        post_init.disconnect(receiver, sender=Job)
    assert seen == jobs and [job.payload for job in jobs] == [{"n": 0}, {"n": 1}, {"n": 2}]


def test_a_job_spec_is_frozen_and_replaced_as_a_dataclass():
    from dataclasses import FrozenInstanceError, replace

    spec = JobSpec(ok, {"n": 1}, priority=2)
    with pytest.raises(FrozenInstanceError):
        spec.priority = 3  # type: ignore[misc]
    assert replace(spec, priority=3) == JobSpec(ok, {"n": 1}, priority=3)
    assert spec == JobSpec(ok, {"n": 1}, priority=2) and spec.queue is None

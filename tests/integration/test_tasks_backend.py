"""JobsBackend: Django's tasks run by django-jobs, compared with Django's ImmediateBackend."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.utils import timezone

from django_jobs.outcomes import TRACEBACK_LIMIT

pytest.importorskip("django_jobs.backend", reason="needs django.tasks or the django-tasks backport")

from django_jobs import cancel_job  # noqa: E402
from django_jobs.backend import JobsBackend, job_options  # noqa: E402
from django_jobs.context import JobContext  # noqa: E402
from django_jobs.db import (
    ClaimRequest,
    get_driver,  # noqa: E402
)
from django_jobs.models import Attempt, AttemptOutcome, Job, JobStatus  # noqa: E402
from django_jobs.tasks.framework import (  # noqa: E402
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from django_jobs.tasks.results import RUNNER, TaskTimedOut, WorkerLost  # noqa: E402
from django_jobs.tasks.runner import run_task  # noqa: E402
from django_jobs.testing import FakeClock, run_until_empty  # noqa: E402
from django_jobs.worker.core import TickResult  # noqa: E402
from tests.support import tasks  # noqa: E402

pytestmark = pytest.mark.django_db

BOTH_QUEUES = {"default": 1, "emails": 1}


def backend() -> JobsBackend:
    found = task_backends["default"]
    assert isinstance(found, JobsBackend)
    return found


def run_all(worker: Any, **options: Any) -> TickResult:
    """Ticks of one worker serving both queues until nothing is due; their counts added up."""
    return run_until_empty(worker(queues=BOTH_QUEUES, **options))


@pytest.fixture
def clock() -> FakeClock:
    """A second from now: ``enqueue()`` makes a task due at the host's time, as
    ``schedule_job()`` does, so the tasks a test enqueues are due on this clock."""
    return FakeClock(timezone.now() + timedelta(seconds=1))


def set_options(settings: Any, **options: Any) -> None:
    """Set ``OPTIONS`` of the default backend, keeping the others (its ``MODULES``)."""
    default = settings.TASKS["default"]
    settings.TASKS = {
        **settings.TASKS,
        "default": {**default, "OPTIONS": {**default.get("OPTIONS", {}), **options}},
    }


@pytest.fixture
def one_attempt(settings: Any) -> None:
    """The default backend gives each task one attempt, as ImmediateBackend runs it once."""
    set_options(settings, MAX_ATTEMPTS=1)


@pytest.fixture
def not_imported(monkeypatch: Any) -> None:
    """The modules that record their import in ``tasks.IMPORTED`` are not imported yet."""
    for name in ("import_witness", "lazy_tasks"):
        monkeypatch.delitem(sys.modules, f"tests.support.{name}", raising=False)
        monkeypatch.delattr(sys.modules["tests.support"], name, raising=False)
    tasks.IMPORTED.clear()


def task_row(make_job: Any, path: str, *args: Any, **overrides: Any) -> Job:
    """A task's row as a hand-written one (or the admin's schedule form) would be."""
    payload = {"task": path, "args": list(args), "kwargs": {}, "backend": "default"}
    return make_job(name=RUNNER, payload=payload, **overrides)


def refusal(path: str) -> str:
    module = path.rpartition(".")[0]
    return (
        f"TaskRefused: task {path!r} is refused: {module!r} is neither an installed app's tasks "
        "module nor listed in TASKS['default']['OPTIONS']['MODULES'] (define the task in an "
        "installed app's tasks.py, or list its module there)"
    )


@pytest.fixture
def heard() -> Iterator[list[tuple[str, Any]]]:
    got: list[tuple[str, Any]] = []
    receivers = []
    for label, signal in (
        ("enqueued", task_enqueued),
        ("started", task_started),
        ("finished", task_finished),
    ):

        def receiver(sender: Any, task_result: Any, label: str = label, **kwargs: Any) -> None:
            row = Job.objects.filter(pk=task_result.id).first()
            got.append((label, (sender, task_result.status, row.status if row else None)))

        signal.connect(receiver, weak=False)
        receivers.append((signal, receiver))
    yield got
    for signal, receiver in receivers:
        signal.disconnect(receiver)


# -- the same task code on both backends ------------------------------------------


@pytest.mark.parametrize(
    ("name", "args", "kwargs"),
    [
        ("add", (2, 3), {}),
        ("echo", (1, "two", [3]), {"four": {"five": 5}, "six": (6, 7)}),
        ("nothing", (), {}),
        ("async_add", (4, 5), {}),
        ("mail", ("ada@example.com",), {}),
    ],
)
def test_tasks_backend_returns_what_immediate_backend_returns(worker, name, args, kwargs):
    subject = getattr(tasks, name)
    immediate = subject.using(backend="immediate").enqueue(*args, **kwargs)
    queued = subject.enqueue(*args, **kwargs)
    assert queued.status == TaskResultStatus.READY and queued.id == str(Job.objects.get().pk)
    assert run_all(worker).succeeded == 1
    got = subject.get_result(queued.id)
    assert got.status == immediate.status == TaskResultStatus.SUCCESSFUL
    assert got.return_value == immediate.return_value
    assert (got.args, got.kwargs) == (immediate.args, immediate.kwargs)
    assert got.errors == immediate.errors == []
    assert got.is_finished and got.finished_at is not None and got.enqueued_at is not None
    assert got.started_at == got.last_attempted_at is not None
    assert got.worker_ids == ["test-worker"] and got.attempts == 1
    assert got.task.func is subject.func and got.backend == "default"


@pytest.mark.parametrize(
    ("name", "args", "kind"),
    [
        ("fail", ("boom",), "builtins.ValueError"),
        ("async_fail", ("gone",), "builtins.KeyError"),
        ("returns_object", (), "builtins.TypeError"),  # not JSON: normalize_json refuses it
    ],
)
def test_tasks_backend_fails_as_immediate_backend_fails(worker, one_attempt, name, args, kind):
    subject = getattr(tasks, name)
    immediate = subject.using(backend="immediate").enqueue(*args)
    queued = subject.enqueue(*args)
    assert run_all(worker).dead_lettered == 1
    got = queued.task.get_result(queued.id)
    assert got.status == immediate.status == TaskResultStatus.FAILED
    [error] = got.errors
    [expected] = immediate.errors
    assert error.exception_class_path == expected.exception_class_path == kind
    assert error.exception_class is expected.exception_class
    assert error.traceback.startswith("Traceback (most recent call last):\n")
    # The same last line (the exception) and the same frame of the task's code.
    assert error.traceback.splitlines()[-1] == expected.traceback.splitlines()[-1]
    assert expected.traceback.splitlines()[-2] in error.traceback
    with pytest.raises(ValueError, match="Task failed"):
        got.return_value  # noqa: B018


def test_tasks_backend_keeps_the_end_of_a_long_traceback(worker, one_attempt):
    """An attempt keeps 10,000 characters of traceback: a longer one loses its first frames."""
    queued = tasks.deep.enqueue(30)
    run_all(worker)
    [error] = backend().get_result(queued.id).errors
    assert error.exception_class_path == "builtins.ValueError"
    lines = error.traceback.splitlines()
    assert lines[:2] == ["Traceback (most recent call last):", "  ..."]
    assert lines[-1] == "ValueError: at depth 30"
    assert 'raise ValueError(f"at depth {depth}") from exc' in lines[-2]
    row = Job.objects.get(pk=queued.id)
    attempt = row.attempts.get()
    # Stored as every job's: the error is one line, the traceback has a column of its own.
    assert row.last_error == attempt.error == "TaskFailed: builtins.ValueError: at depth 30"
    assert attempt.traceback == error.traceback
    assert len(attempt.traceback) <= TRACEBACK_LIMIT


# -- statuses -----------------------------------------------------------------------


def test_tasks_backend_maps_every_job_status(worker, clock, one_attempt):
    ready = tasks.add.enqueue(1, 1)
    assert backend().get_result(ready.id).status == TaskResultStatus.READY
    [claimed] = get_driver().claim(ClaimRequest("default", "w-1", clock.now(), 60))
    running = backend().get_result(ready.id)
    assert (running.status, running.worker_ids) == (TaskResultStatus.RUNNING, ["w-1"])
    assert running.started_at is not None and running.finished_at is None

    done = tasks.add.enqueue(2, 2)
    failed = tasks.fail.enqueue("no")
    cancelled = tasks.add.enqueue(3, 3)
    cancel_job(int(cancelled.id))
    run_all(worker)
    assert backend().get_result(done.id).status == TaskResultStatus.SUCCESSFUL
    assert backend().get_result(failed.id).status == TaskResultStatus.FAILED
    assert Job.objects.get(pk=failed.id).status == JobStatus.DEAD_LETTERED
    result = backend().get_result(cancelled.id)
    assert result.status == TaskResultStatus.FAILED and result.worker_ids == []
    [error] = result.errors
    assert error.exception_class_path == "django_jobs.exceptions.JobCancelled"
    assert "cancel_job() before it ran" in error.traceback


def test_tasks_backend_reports_a_retry_as_ready_with_its_error(worker):
    queued = tasks.fail.enqueue("again")
    assert run_all(worker).retried == 1
    result = backend().get_result(queued.id)
    assert result.status == TaskResultStatus.READY and not result.is_finished
    assert [e.exception_class_path for e in result.errors] == ["builtins.ValueError"]
    assert result.finished_at is None and result.attempts == 1


def test_tasks_backend_maps_attempts_the_worker_ended(make_job, clock):
    """A timeout, a lost lease and a cancel while running are errors with classes of their own."""
    row = make_job(
        name=RUNNER,
        payload={
            "task": "tests.support.tasks.add",
            "args": [1, 2],
            "kwargs": {},
            "backend": "default",
        },
        status=JobStatus.DEAD_LETTERED,
        finished_at=clock.now(),
    )
    ended = [
        (AttemptOutcome.TIMED_OUT, "TimedOut: handler ran past its timeout on attempt 1"),
        (AttemptOutcome.LEASE_EXPIRED, "LeaseExpired: the worker stopped renewing"),
        (AttemptOutcome.CANCELLED, "Cancelled: cancel_job() stopped attempt 3 while it ran"),
        (AttemptOutcome.FAILED, "PayloadError: the payload is not JSON"),
        (AttemptOutcome.RELEASED, "Released: the worker stopped before the handler finished"),
    ]
    for number, (outcome, error) in enumerate(ended, start=1):
        Attempt.objects.create(
            job=row,
            number=number,
            owner=f"w-{number}",
            started_at=clock.now(),
            outcome=outcome,
            error=error,
        )
    result = backend().get_result(str(row.pk))
    assert result.worker_ids == ["w-1", "w-2", "w-3", "w-4", "w-5"]
    assert [e.exception_class for e in result.errors] == [
        TaskTimedOut,
        WorkerLost,
        __import__("django_jobs.exceptions").exceptions.JobCancelled,
        __import__("django_jobs.exceptions").exceptions.PayloadError,
    ]
    assert result.errors[0].traceback == ended[0][1]


# -- results by id ----------------------------------------------------------------


@pytest.mark.parametrize("result_id", ["999999", "abc", "", "-1", "1.0", "٣"])
def test_tasks_backend_get_result_of_an_unknown_id_raises(result_id):
    with pytest.raises(TaskResultDoesNotExist):
        backend().get_result(result_id)
    with pytest.raises(TaskResultDoesNotExist):
        async_to_sync(backend().aget_result)(result_id)


def test_tasks_backend_get_result_of_a_plain_job_raises(make_job):
    plain = make_job(name="tests.ok")
    with pytest.raises(TaskResultDoesNotExist):
        backend().get_result(str(plain.pk))


def test_tasks_backend_aget_result_and_refresh_read_the_row(worker):
    queued = tasks.add.enqueue(20, 22)
    run_all(worker)
    got = async_to_sync(tasks.add.aget_result)(queued.id)
    assert got.return_value == 42
    queued.refresh()
    assert queued.status == TaskResultStatus.SUCCESSFUL and queued.return_value == 42


def test_tasks_backend_runs_in_tests_with_run_until_empty(worker):
    """A worker serving every queue (``queues=None``), on the test's thread."""
    queued = tasks.mail.enqueue("ada@example.com")
    assert run_until_empty(worker(queues=None)).succeeded == 1
    assert backend().get_result(queued.id).return_value == "sent to ada@example.com"


def test_tasks_backend_aenqueue_writes_a_row(worker):
    queued = async_to_sync(tasks.add.aenqueue)(1, 2)
    assert Job.objects.get(pk=queued.id).name == "tests.support.tasks.add"


# -- context, attempts, workers -------------------------------------------------------


def test_tasks_backend_context_counts_attempts_across_retries(worker, clock):
    tasks.CALLS.clear()
    queued = tasks.flaky.enqueue(3)
    first, second = worker(owner="w-a"), worker(owner="w-b")
    assert first.run_once().retried == 1
    clock.advance(3600)
    assert second.run_once().retried == 1
    clock.advance(3600)
    assert first.run_once().succeeded == 1
    assert tasks.CALLS == ["attempt 1", "attempt 2", "attempt 3"]
    result = backend().get_result(queued.id)
    assert result.return_value == {"attempt": 3, "id": queued.id}
    assert result.worker_ids == ["w-a", "w-b", "w-a"] and result.attempts == 3
    assert [str(e.traceback.splitlines()[-1]) for e in result.errors] == [
        "RuntimeError: failed on attempt 1",
        "RuntimeError: failed on attempt 2",
    ]


def test_tasks_backend_context_matches_immediate_backend_on_one_attempt(worker):
    tasks.CALLS.clear()
    immediate = tasks.flaky.using(backend="immediate").enqueue(1)
    queued = tasks.flaky.enqueue(1)
    run_all(worker)
    assert tasks.CALLS == ["attempt 1", "attempt 1"]
    assert backend().get_result(queued.id).return_value["attempt"] == 1
    assert immediate.return_value["attempt"] == 1


# -- secrets ---------------------------------------------------------------------------


def test_tasks_backend_masks_secret_arguments_in_errors(worker, one_attempt):
    queued = tasks.leaks.enqueue(
        "sk-live-0123456789",
        "visible-note",
        password="hunter2hunter2",
        nested={"token": "tok-99887766"},
    )
    run_all(worker)
    row = Job.objects.get(pk=queued.id)
    [error] = backend().get_result(queued.id).errors
    attempt = row.attempts.get()
    assert "leaks" in attempt.traceback  # the task's own frame
    for text in (error.traceback, row.last_error, attempt.error, attempt.traceback):
        assert "sk-live-0123456789" not in text and "hunter2hunter2" not in text
        assert "tok-99887766" not in text
        assert "visible-note" in text and "***" in text


# -- options: queue, priority, run_after, retries ------------------------------------------


def test_tasks_backend_maps_queue_priority_and_run_after(clock):
    later = clock.now() + timedelta(hours=2)
    mail = Job.objects.get(pk=tasks.mail.enqueue("x@example.com").id)
    low = Job.objects.get(pk=tasks.low.enqueue(1).id)
    top = Job.objects.get(pk=tasks.add.using(priority=100, run_after=later).enqueue(1, 2).id)
    assert (mail.queue, mail.priority) == ("emails", 10)
    assert (low.queue, low.priority) == ("default", -50)
    assert (top.priority, top.run_at) == (100, later)
    result = backend().get_result(str(top.pk))
    assert (result.task.priority, result.task.run_after) == (100, later)


def test_tasks_backend_runs_higher_priorities_first(worker, clock):
    low = tasks.low.enqueue(1)
    high = tasks.add.using(priority=5).enqueue(1, 1)
    w = worker()
    [first] = w.claimer.claim("default", clock.now(), 1)
    assert str(first.id) == high.id
    assert backend().get_result(low.id).status == TaskResultStatus.READY


def test_tasks_backend_does_not_run_a_deferred_task_early(worker, clock):
    queued = tasks.add.using(run_after=clock.now() + timedelta(minutes=5)).enqueue(1, 1)
    assert run_all(worker).claimed == 0
    clock.advance(301)
    assert run_all(worker).succeeded == 1
    assert backend().get_result(queued.id).return_value == 2


def test_tasks_backend_max_attempts_from_options_and_job_options(settings):
    assert Job.objects.get(pk=tasks.add.enqueue(1, 1).id).max_attempts == 5  # DJANGO_JOBS'
    assert Job.objects.get(pk=tasks.twice.enqueue("x").id).max_attempts == 2
    set_options(settings, MAX_ATTEMPTS=4)
    assert Job.objects.get(pk=tasks.add.enqueue(1, 1).id).max_attempts == 4
    assert Job.objects.get(pk=tasks.twice.enqueue("x").id).max_attempts == 2


def test_tasks_backend_job_options_run_on_immediate_backend_too():
    result = tasks.twice.using(backend="immediate").enqueue("plain")
    assert result.status == TaskResultStatus.FAILED


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"MAX_ATTEMPTS": 0}, "MAX_ATTEMPTS'] must be an integer from 1 to 2147483647"),
        ({"MAX_ATTEMPTS": "3"}, "MAX_ATTEMPTS'] must be an integer from 1 to 2147483647"),
        ({"MAX_ATTEMPTS": 2**31}, "MAX_ATTEMPTS'] must be an integer from 1 to 2147483647"),
        ({"RETRIES": 3}, "unknown keys \\['RETRIES'\\]"),
        ({"MODULES": "myapp.emails"}, "MODULES'] must be a list of dotted module names"),
        ({"MODULES": ["myapp.emails", 3]}, "MODULES'] must be a list of dotted module names"),
        ({"MODULES": ["myapp..emails"]}, "MODULES'] must be a list of dotted module names"),
        ({"MODULES": ["myapp/emails.py"]}, "MODULES'] must be a list of dotted module names"),
        ({"MODULES": [""]}, "MODULES'] must be a list of dotted module names"),
    ],
)
def test_tasks_backend_refuses_bad_options(options, message):
    with pytest.raises(ImproperlyConfigured, match=message):
        JobsBackend("bad", {"OPTIONS": options})


def test_tasks_backend_takes_good_options():
    backend = JobsBackend("ok", {"OPTIONS": {"MAX_ATTEMPTS": 2**31 - 1, "MODULES": ("a.b", "c")}})
    assert (backend.max_attempts, backend.task_modules) == (2**31 - 1, {"a.b", "c"})
    assert JobsBackend("none", {}).task_modules == frozenset()


def test_tasks_backend_job_options_refuse_bad_values_and_placement():
    for value in (0, 2**31, 2**40, True):
        with pytest.raises(ValueError, match="max_attempts=...\\) must be an integer from 1 to"):
            job_options(max_attempts=value)
    assert job_options(max_attempts=2**31 - 1)
    with pytest.raises(TypeError, match="under @task"):
        job_options(max_attempts=2)(tasks.add)


# -- validation, as the base class does --------------------------------------------------


def test_tasks_backend_validates_tasks_as_django_does(clock):
    with pytest.raises(InvalidTask, match="priority"):
        tasks.add.using(priority=101)
    with pytest.raises(InvalidTask, match="Queue 'nowhere' is not valid"):
        tasks.add.using(queue_name="nowhere")
    with pytest.raises(InvalidTask, match="aware"):
        tasks.add.using(run_after=clock.now().replace(tzinfo=None))
    with pytest.raises(InvalidTask, match="module level"):

        @task()
        def local() -> None:
            pass

    assert (backend().supports_defer, backend().supports_async_task) == (True, True)
    assert (backend().supports_get_result, backend().supports_priority) == (True, True)
    assert not Job.objects.exists()


def test_tasks_backend_refuses_arguments_that_are_not_json():
    with pytest.raises(TypeError):
        tasks.echo.enqueue(object())
    assert not Job.objects.exists()


@pytest.mark.parametrize("queue", ["q\x00", "q\ud800", "q" * 101], ids=repr)
def test_tasks_backend_refuses_a_queue_no_database_stores_before_any_write(settings, queue):
    settings.TASKS = {
        **settings.TASKS,
        "default": {**settings.TASKS["default"], "QUEUES": ["default", queue]},
    }
    with transaction.atomic():
        before = tasks.add.enqueue(1, 1)
        with pytest.raises(ValueError, match="^queue .* at most 100 characters without NUL"):
            tasks.add.using(queue_name=queue).enqueue(1, 2)
        assert list(Job.objects.values_list("pk", flat=True)) == [int(before.id)]
        after = tasks.add.enqueue(1, 3)
    assert sorted(Job.objects.values_list("pk", flat=True)) == [int(before.id), int(after.id)]


# -- the paths a row may name: declared tasks, and modules the project allows --------------


def test_tasks_backend_runner_refuses_a_module_the_project_does_not_declare(worker, make_job):
    row = task_row(make_job, "os.getcwd", max_attempts=1)
    assert worker().run_once().dead_lettered == 1
    row.refresh_from_db()
    assert row.last_error == refusal("os.getcwd")


def test_tasks_backend_runner_never_imports_a_module_it_refuses(
    worker, make_job, not_imported, caplog
):
    row = task_row(make_job, "tests.support.import_witness.not_a_task", max_attempts=2)
    # Dead-lettered on its first attempt: no retry in this deployment could pass.
    assert worker().run_once().dead_lettered == 1
    row.refresh_from_db()
    assert row.last_error == refusal("tests.support.import_witness.not_a_task")
    with pytest.raises(ValueError, match="is refused: 'tests.support.import_witness' is neither"):
        backend().get_result(str(row.pk))
    assert "tests.support.import_witness" not in sys.modules and tasks.IMPORTED == []
    # No task to report on: task_finished is not sent, and no receiver fails.
    assert "signal_receiver_failed" not in {getattr(r, "event", None) for r in caplog.records}


def test_tasks_backend_runner_refuses_before_a_query(
    make_job, not_imported, django_assert_num_queries
):
    """As an unknown job's name: the attempt fails before the row or its attempts are read."""
    row = task_row(make_job, "tests.support.import_witness.not_a_task")
    ctx = JobContext(job_id=row.pk, name=RUNNER, queue="default", attempt=1, payload=None)
    with django_assert_num_queries(0), pytest.raises(ValueError, match="is refused"):
        run_task(ctx, row.payload)
    assert "tests.support.import_witness" not in sys.modules


def test_tasks_backend_runner_refuses_what_is_not_a_task_in_an_allowed_module(
    worker, make_job, settings, not_imported
):
    set_options(settings, MODULES=["tests.support.tasks", "tests.support.import_witness"])
    row = task_row(make_job, "tests.support.import_witness.not_a_task", max_attempts=1)
    assert worker().run_once().dead_lettered == 1
    row.refresh_from_db()
    assert row.last_error == (
        "ValueError: 'tests.support.import_witness.not_a_task' is not a task "
        "(decorate it with @task)"
    )
    assert tasks.IMPORTED == ["tests.support.import_witness"]


def test_tasks_backend_runs_a_task_of_a_listed_module_not_yet_imported(
    worker, make_job, settings, not_imported
):
    refused = task_row(make_job, "tests.support.lazy_tasks.double", 4, max_attempts=1)
    assert worker().run_once().dead_lettered == 1
    assert Job.objects.get(pk=refused.pk).last_error == refusal("tests.support.lazy_tasks.double")
    assert tasks.IMPORTED == []

    set_options(settings, MODULES=["tests.support.tasks", "tests.support.lazy_tasks"])
    row = task_row(make_job, "tests.support.lazy_tasks.double", 21)
    assert worker().run_once().succeeded == 1
    assert backend().get_result(str(row.pk)).return_value == 42
    assert tasks.IMPORTED == ["tests.support.lazy_tasks"]


def test_tasks_backend_runs_a_task_of_an_installed_apps_tasks_module(worker, make_job, monkeypatch):
    """``testproject.example`` is an installed app: its ``tasks`` module needs no listing."""
    monkeypatch.delitem(sys.modules, "testproject.example.tasks", raising=False)
    row = task_row(make_job, "testproject.example.tasks.send_welcome", "ada@example.com")
    assert worker().run_once().succeeded == 1
    assert backend().get_result(str(row.pk)).return_value == "welcome mail to ada@example.com"
    assert "testproject.example.tasks" in sys.modules


def test_tasks_backend_runs_a_declared_task_of_a_module_not_listed(worker, make_job, not_imported):
    """A task ``@task`` made in this process resolves wherever its module is: it is imported."""
    lazy_tasks = importlib.import_module("tests.support.lazy_tasks")
    row = task_row(make_job, "tests.support.lazy_tasks.double", 5)
    assert worker().run_once().succeeded == 1
    assert lazy_tasks.double.get_result(str(row.pk)).return_value == 10
    assert tasks.IMPORTED == ["tests.support.lazy_tasks"]  # by this test, not by the worker
    # Declared, but its module is no longer imported: it is not imported again for a row.
    del sys.modules["tests.support.lazy_tasks"]
    again = task_row(make_job, "tests.support.lazy_tasks.double", 6)
    assert worker().run_once().dead_lettered == 1
    assert Job.objects.get(pk=again.pk).last_error == refusal("tests.support.lazy_tasks.double")
    assert tasks.IMPORTED == ["tests.support.lazy_tasks"]


def test_tasks_backend_check_warns_of_an_undeclared_queue():
    [warning] = JobsBackend("other", {"QUEUES": ["default", "nowhere"]}).check()
    assert warning.id == "django_jobs.W030" and "'nowhere'" in warning.msg
    assert JobsBackend("any", {"QUEUES": []}).check() == []


def test_tasks_backend_check_leaves_bad_queues_to_the_settings_check(settings):
    """A bad ``DJANGO_JOBS["QUEUES"]`` is django_jobs.E004's to report, not a crash here."""
    settings.DJANGO_JOBS = {**settings.DJANGO_JOBS, "QUEUES": {"default": {"timeout": "30s"}}}
    assert JobsBackend("other", {"QUEUES": ["default", "nowhere"]}).check() == []


# -- signals -------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_tasks_backend_sends_enqueued_once_the_row_commits(heard):
    with transaction.atomic():
        queued = tasks.add.enqueue(1, 2)
        assert heard == []
    assert heard == [("enqueued", (JobsBackend, TaskResultStatus.READY, JobStatus.PENDING))]
    with transaction.atomic():
        tasks.add.enqueue(3, 4)
        transaction.set_rollback(True)
    assert len(heard) == 1 and Job.objects.get().pk == int(queued.id)


@pytest.mark.django_db(transaction=True)
def test_tasks_backend_sends_started_and_finished_around_each_attempt(worker, clock, heard):
    tasks.flaky.enqueue(2)
    heard.clear()
    run_all(worker)
    clock.advance(3600)
    run_all(worker)
    assert heard == [
        ("started", (JobsBackend, TaskResultStatus.RUNNING, JobStatus.RUNNING)),
        ("finished", (JobsBackend, TaskResultStatus.READY, JobStatus.PENDING)),
        ("started", (JobsBackend, TaskResultStatus.RUNNING, JobStatus.RUNNING)),
        ("finished", (JobsBackend, TaskResultStatus.SUCCESSFUL, JobStatus.SUCCEEDED)),
    ]


@pytest.mark.django_db(transaction=True)
def test_tasks_backend_finished_carries_the_outcome(worker, one_attempt):
    finished: list[Any] = []

    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
        finished.append(task_result)

    task_finished.connect(receiver)
    try:
        tasks.add.enqueue(1, 2)
        tasks.fail.enqueue("bad")
        cancelled = tasks.add.enqueue(5, 5)
        cancel_job(int(cancelled.id))
        run_all(worker)
    finally:
        task_finished.disconnect(receiver)
    by_id = {r.id: r for r in finished}
    assert len(by_id) == 3
    ok, failed = sorted((r for r in finished if r.id != cancelled.id), key=lambda r: int(r.id))
    assert (ok.status, ok.return_value, ok.finished_at is not None) == (
        TaskResultStatus.SUCCESSFUL,
        3,
        True,
    )
    assert failed.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in failed.errors] == ["builtins.ValueError"]
    assert by_id[cancelled.id].status == TaskResultStatus.FAILED


@pytest.mark.django_db(transaction=True)
def test_tasks_backend_signal_receiver_that_raises_changes_nothing(worker, caplog):
    def broken(sender: Any, **kwargs: Any) -> None:
        raise RuntimeError("receiver broke")

    task_started.connect(broken)
    task_finished.connect(broken)
    try:
        queued = tasks.add.enqueue(2, 2)
        assert run_all(worker).succeeded == 1
    finally:
        task_started.disconnect(broken)
        task_finished.disconnect(broken)
    assert backend().get_result(queued.id).return_value == 4
    assert "receiver broke" in caplog.text


# -- without the framework -----------------------------------------------------------------


def test_tasks_backend_without_the_framework_names_what_to_install(monkeypatch):
    for name in ("django.tasks", "django_tasks"):
        monkeypatch.setitem(sys.modules, name, None)
    for name in ("django_jobs.backend", "django_jobs.tasks.framework"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(ImportError, match="django-tasks") as raised:
        __import__("django_jobs.backend")
    assert isinstance(raised.value, ImproperlyConfigured)
    assert "Django 6.0 or newer" in str(raised.value)

"""The jobs and dead-letter pages, through the test client: lists, change pages, the verbs
behind their actions and buttons, permissions, CSRF and deleting finished jobs only."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Permission
from django.contrib.messages import get_messages
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape
from freezegun import freeze_time

from django_jobs.admin import common
from django_jobs.display import format_span as format_duration
from django_jobs.models import Attempt, AttemptOutcome, Batch, Job, JobStatus, RecurringJob
from tests.conftest import START

pytestmark = pytest.mark.django_db

DEAD_LETTERS = "admin:django_jobs_deadletter_changelist"
JOBS = "admin:django_jobs_job_changelist"
DEAD_LETTER_CHANGE = "admin:django_jobs_deadletter_change"
BOTH_CHANGELISTS = pytest.mark.parametrize("changelist", [DEAD_LETTERS, JOBS])
COMPARED_FIELDS = (
    "id",
    "status",
    "attempts_used",
    "run_at",
    "finished_at",
    "last_error",
    "unique_key",
)


def snapshot() -> list[tuple[Any, ...]]:
    return list(Job.objects.order_by("id").values_list(*COMPARED_FIELDS))


def post_action(client: Client, changelist: str, action: str, jobs: list[Job]) -> Any:
    return client.post(
        reverse(changelist),
        {
            "action": action,
            "index": "0",
            "select_across": "0",
            ACTION_CHECKBOX_NAME: [str(job.pk) for job in jobs],
        },
        follow=True,
    )


def post_retry(client: Client, changelist: str, jobs: list[Job]) -> Any:
    return post_action(client, changelist, "retry_selected", jobs)


def messages_of(response: Any) -> list[tuple[str, str]]:
    return [(message.level_tag, message.message) for message in get_messages(response.wsgi_request)]


def link(job: Job) -> str:
    return f'<a href="{change_url(job)}">#{job.pk}</a>'


def change_url(job: Job) -> str:
    return reverse("admin:django_jobs_job_change", args=[job.pk])


def verb_url(job: Job, verb: str) -> str:
    return reverse(f"admin:django_jobs_job_{verb}", args=[job.pk])


@pytest.fixture
def make_dead_letter(make_job: Callable[..., Job], clock: Any) -> Callable[..., Job]:
    """A job that used up its attempts, as the worker leaves it."""

    def make(**overrides: Any) -> Job:
        values: dict[str, Any] = {
            "status": JobStatus.DEAD_LETTERED,
            "attempt": 3,
            "attempts_used": 3,
            "finished_at": clock.now(),
            "last_error": "RuntimeError: boom 3",
        }
        values.update(overrides)
        return make_job(**values)

    return make


def test_dead_letters_changelist_lists_dead_letters_newest_first(
    admin_client, make_job, make_dead_letter, clock
):
    now = clock.now()
    oldest = make_dead_letter(finished_at=now - timedelta(hours=3), last_error="E: oldest")
    newest = make_dead_letter(finished_at=now - timedelta(hours=1), last_error="E: newest")
    middle = make_dead_letter(finished_at=now - timedelta(hours=2), last_error="E: middle")
    pending = make_job(status=JobStatus.PENDING, last_error="E: pending, retried later")
    succeeded = make_job(status=JobStatus.SUCCEEDED, finished_at=now, last_error="E: succeeded")

    response = admin_client.get(reverse(DEAD_LETTERS))

    assert response.status_code == 200
    listed = [job.pk for job in response.context["cl"].result_list]
    assert listed == [newest.pk, middle.pk, oldest.pk]
    page = response.content.decode()
    assert page.index("E: newest") < page.index("E: middle") < page.index("E: oldest")
    assert "E: pending" not in page
    assert "E: succeeded" not in page
    assert {pending.pk, succeeded.pk}.isdisjoint(listed)


def test_dead_letters_changelist_truncates_long_errors(admin_client, make_dead_letter):
    make_dead_letter(last_error="ValueError: " + "x" * 5000)

    response = admin_client.get(reverse(DEAD_LETTERS))

    page = response.content.decode()
    full = "ValueError: " + "x" * 1988  # as much as the worker stores, in the tooltip
    assert f'<span class="django-jobs-clamp" title="{full}">ValueError: ' + "x" * 107 + "…" in page
    assert "x" * 1989 not in page


def test_job_changelist_renders_for_superuser(admin_client, make_job, make_dead_letter):
    others = [status for status in JobStatus.values if status != JobStatus.DEAD_LETTERED]
    jobs = [make_dead_letter(), *(make_job(status=status) for status in others)]

    response = admin_client.get(reverse(JOBS))

    assert response.status_code == 200
    assert {job.pk for job in response.context["cl"].result_list} == {job.pk for job in jobs}
    assert "3/3" in response.content.decode()  # the attempts column of the dead letter


def test_job_change_page_renders_attempts_inline(admin_client, make_dead_letter, clock):
    job = make_dead_letter(attempt=2, attempts_used=2, last_error="RuntimeError: boom 2")
    started_at = clock.now() - timedelta(hours=2)
    for number in (1, 2):
        Attempt.objects.create(
            job=job,
            number=number,
            owner=f"host-{number}",
            started_at=started_at + timedelta(minutes=number),
            finished_at=started_at + timedelta(minutes=number, seconds=1),
            outcome=AttemptOutcome.FAILED,
            error=f"RuntimeError: boom {number}",
        )

    response = admin_client.get(reverse("admin:django_jobs_job_change", args=[job.pk]))

    assert response.status_code == 200
    (attempts,) = response.context["inline_admin_formsets"]
    assert [form.original.number for form in attempts] == [1, 2]
    page = response.content.decode()
    assert "host-1" in page
    assert "RuntimeError: boom 1" in page
    assert 'name="_save"' not in page  # read-only


@pytest.mark.parametrize("model", ["job", "deadletter"])
def test_job_admin_does_not_allow_adding(admin_client, model):
    changelist = admin_client.get(reverse(f"admin:django_jobs_{model}_changelist"))
    assert changelist.context["has_add_permission"] is False
    add_url = reverse(f"admin:django_jobs_{model}_add")
    assert add_url not in changelist.content.decode()

    response = admin_client.post(add_url, {"name": "tests.ok", "queue": "default"})

    assert response.status_code == 403
    assert not Job.objects.exists()


@BOTH_CHANGELISTS
def test_retry_selected_puts_dead_letters_back(staff_client, make_dead_letter, changelist):
    client = staff_client("view_job", "view_deadletter", "change_job")
    first, second, untouched = make_dead_letter(), make_dead_letter(), make_dead_letter()
    before = timezone.now()

    response = post_retry(client, changelist, [first, second])

    after = timezone.now()
    assert response.status_code == 200
    assert messages_of(response) == [("success", "2 job(s) queued again.")]
    for job in (first, second):
        job.refresh_from_db()
        assert job.status == JobStatus.PENDING
        assert job.attempts_used == 0
        assert job.finished_at is None
        assert before <= job.run_at <= after
    untouched.refresh_from_db()
    assert untouched.status == JobStatus.DEAD_LETTERED


@BOTH_CHANGELISTS
def test_retry_selected_refused_without_change_permission(
    staff_client, make_dead_letter, changelist
):
    client = staff_client("view_job", "view_deadletter")
    job = make_dead_letter()
    before = snapshot()

    page = client.get(reverse(changelist))
    response = post_retry(client, changelist, [job])

    assert page.status_code == 200
    assert "retry_selected" not in page.content.decode()
    assert "retry_selected" not in response.content.decode()
    assert not any(level == "success" for level, _ in messages_of(response))
    assert snapshot() == before


def test_retry_selected_leaves_live_and_succeeded_jobs_and_links_to_them(admin_client, make_job):
    statuses = (JobStatus.PENDING, JobStatus.RUNNING, JobStatus.SUCCEEDED)
    jobs = [make_job(status=status) for status in statuses]
    before = snapshot()

    response = post_retry(admin_client, JOBS, jobs)

    assert response.status_code == 200
    reasons = ", ".join(f"{link(job)} (it is {job.status})" for job in jobs)
    assert messages_of(response) == [("warning", f"3 job(s) not retried: {reasons}.")]
    assert snapshot() == before


def test_retry_selected_leaves_dead_letter_whose_unique_key_is_live(
    admin_client, make_job, make_dead_letter
):
    make_job(status=JobStatus.PENDING, unique_key="invoice-7")
    dead = make_dead_letter(unique_key="invoice-7")
    before = snapshot()

    response = post_retry(admin_client, DEAD_LETTERS, [dead])

    assert response.status_code == 200
    assert messages_of(response) == [
        ("warning", f"1 job(s) not retried: {link(dead)} (a live job has the same unique key).")
    ]
    assert snapshot() == before


@BOTH_CHANGELISTS
@pytest.mark.parametrize("who", ["anonymous", "non-staff"])
def test_admin_redirects_non_staff_to_login(client, django_user_model, changelist, who):
    if who == "non-staff":
        client.force_login(django_user_model.objects.create_user("visitor", password="unused"))
    url = reverse(changelist)

    response = client.get(url)

    assert response.status_code == 302
    assert response["Location"] == f"{reverse('admin:login')}?next={url}"


def test_admin_cancel_action_cancels_pending_asks_running_and_skips_finished(
    admin_client: Client, make_job: Callable[..., Job]
) -> None:
    pending = make_job()
    running = make_job(status=JobStatus.RUNNING, lease_owner="w1", attempt=1, attempts_used=1)
    finished = make_job(status=JobStatus.SUCCEEDED)
    response = post_action(admin_client, JOBS, "cancel_selected", [pending, running, finished])
    assert messages_of(response) == [
        ("success", "1 job(s) cancelled."),
        (
            "success",
            "1 running job(s) asked to stop: their workers cancel them at their next heartbeat.",
        ),
        ("warning", f"1 job(s) not cancelled: {link(finished)} (it is succeeded)."),
    ]
    statuses = dict(Job.objects.values_list("id", "status"))
    assert statuses == {
        pending.pk: JobStatus.CANCELLED,
        running.pk: JobStatus.RUNNING,
        finished.pk: JobStatus.SUCCEEDED,
    }
    assert Job.objects.get(pk=running.pk).cancel_requested_at is not None


def test_admin_cancel_action_needs_the_change_permission(
    client: Client, django_user_model: Any, make_job: Callable[..., Job]
) -> None:

    viewer = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_job"))
    client.force_login(viewer)
    job = make_job()
    post_action(client, JOBS, "cancel_selected", [job])
    assert Job.objects.get(pk=job.pk).status == JobStatus.PENDING


# -- the verbs behind the actions: retry, retry now, run now ---------------------------------

LATER = START + timedelta(days=365 * 10)  # later than the wall clock the admin reads


def test_retry_selected_puts_a_cancelled_job_back(admin_client, make_job):
    job = make_job(status=JobStatus.CANCELLED, finished_at=START, cancel_requested_at=START)

    response = post_retry(admin_client, JOBS, [job])

    assert messages_of(response) == [("success", "1 job(s) queued again.")]
    job.refresh_from_db()
    assert (job.status, job.cancel_requested_at) == (JobStatus.PENDING, None)


def test_run_now_selected_makes_scheduled_jobs_due_and_says_why_it_skipped_the_others(
    admin_client, make_job
):
    scheduled = make_job(run_at=LATER)
    backing_off = make_job(run_at=LATER, attempt=1, attempts_used=1)
    due = make_job(run_at=START)
    running = make_job(status=JobStatus.RUNNING, run_at=LATER, attempt=1, attempts_used=1)
    before = timezone.now()

    response = post_action(
        admin_client, JOBS, "run_now_selected", [scheduled, backing_off, due, running]
    )

    assert messages_of(response) == [
        ("success", "1 job(s) due now instead of at their scheduled time."),
        (
            "warning",
            f"3 job(s) not run now: {link(backing_off)} (waiting out a backoff), "
            f"{link(due)} (already due), {link(running)} (it is running).",
        ),
    ]
    scheduled.refresh_from_db()
    assert before <= scheduled.run_at <= timezone.now()
    for job in (backing_off, running):
        job.refresh_from_db()
        assert job.run_at == LATER
    assert Job.objects.get(pk=due.pk).run_at == START


def test_retry_now_selected_makes_backing_off_jobs_due_keeping_their_attempts(
    admin_client, make_job
):
    backing_off = make_job(run_at=LATER, attempt=2, attempts_used=2, last_error="E: boom")
    scheduled = make_job(run_at=LATER)
    finished = make_job(status=JobStatus.DEAD_LETTERED, run_at=LATER, finished_at=START)

    response = post_action(
        admin_client, JOBS, "retry_now_selected", [backing_off, scheduled, finished]
    )

    assert messages_of(response) == [
        ("success", "1 job(s) retried now: due at once, without waiting out the backoff."),
        (
            "warning",
            f"2 job(s) not retried now: {link(scheduled)} "
            f"(scheduled, with no attempt used), {link(finished)} (it is dead-lettered).",
        ),
    ]
    backing_off.refresh_from_db()
    assert backing_off.run_at <= timezone.now()
    assert (backing_off.attempts_used, backing_off.last_error) == (2, "E: boom")
    assert Job.objects.get(pk=scheduled.pk).run_at == LATER


def test_action_message_links_to_the_first_skipped_jobs_and_counts_the_rest(admin_client, make_job):
    jobs = [make_job(status=JobStatus.SUCCEEDED) for _ in range(23)]

    response = post_action(admin_client, JOBS, "cancel_selected", jobs)

    [(level, message)] = messages_of(response)
    assert level == "warning"
    assert message.startswith(f"23 job(s) not cancelled: {link(jobs[0])} (it is succeeded), ")
    assert message.endswith(f"{link(jobs[19])} (it is succeeded), and 3 more.")
    assert link(jobs[20]) not in message


# -- the buttons on a job's page -------------------------------------------------------------

BUTTON_CASES = {
    "scheduled": ({"run_at": LATER}, ["run_now", "cancel"]),
    "backing off": ({"run_at": LATER, "attempt": 1, "attempts_used": 1}, ["retry_now", "cancel"]),
    "due": ({}, ["cancel"]),
    "running": ({"status": JobStatus.RUNNING, "attempt": 1, "attempts_used": 1}, ["cancel"]),
    "succeeded": ({"status": JobStatus.SUCCEEDED, "finished_at": START}, []),
    "dead-lettered": ({"status": JobStatus.DEAD_LETTERED, "finished_at": START}, ["retry"]),
    "cancelled": ({"status": JobStatus.CANCELLED, "finished_at": START}, ["retry"]),
}
VERBS = ("retry", "retry_now", "run_now", "cancel")


@pytest.mark.parametrize("case", BUTTON_CASES)
def test_job_page_shows_only_the_buttons_that_apply_to_its_status(admin_client, make_job, case):
    overrides, expected = BUTTON_CASES[case]
    job = make_job(**overrides)

    page = admin_client.get(change_url(job)).content.decode()

    shown = [verb for verb in VERBS if f'action="{verb_url(job, verb)}"' in page]
    assert shown == expected


@pytest.mark.parametrize(
    ("case", "verb", "status", "run_at"),
    [
        ("scheduled", "run_now", JobStatus.PENDING, "now"),
        ("backing off", "retry_now", JobStatus.PENDING, "now"),
        ("running", "cancel", JobStatus.RUNNING, "unchanged"),
        ("due", "cancel", JobStatus.CANCELLED, "unchanged"),
        ("dead-lettered", "retry", JobStatus.PENDING, "now"),
        ("cancelled", "retry", JobStatus.PENDING, "now"),
    ],
)
def test_job_page_button_posts_its_verb_and_comes_back_to_the_job(
    admin_client, make_job, case, verb, status, run_at
):
    job = make_job(**BUTTON_CASES[case][0])
    before = timezone.now()

    response = admin_client.post(verb_url(job, verb))

    assert response.status_code == 302
    assert response["Location"] == change_url(job)
    done = Job.objects.get(pk=job.pk)
    assert done.status == status
    if run_at == "now":
        assert before <= done.run_at <= timezone.now()
    else:
        assert done.run_at == job.run_at


def test_job_page_button_for_a_job_claimed_since_the_page_loaded_is_skipped_and_reported(
    admin_client, make_job
):
    job = make_job(run_at=LATER)
    page = admin_client.get(change_url(job)).content.decode()
    assert verb_url(job, "run_now") in page
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING, lease_owner="w1", attempt=1)

    response = admin_client.post(verb_url(job, "run_now"), follow=True)

    assert messages_of(response) == [
        ("warning", f"1 job(s) not run now: {link(job)} (it is running).")
    ]
    assert Job.objects.get(pk=job.pk).run_at == LATER


def test_job_page_button_for_a_job_that_became_due_since_the_page_loaded_is_skipped(
    admin_client, make_job
):
    job = make_job(run_at=LATER, attempt=1, attempts_used=1)
    page = admin_client.get(change_url(job)).content.decode()
    assert verb_url(job, "retry_now") in page
    Job.objects.filter(pk=job.pk).update(run_at=START)  # its backoff ran out meanwhile

    response = admin_client.post(verb_url(job, "retry_now"), follow=True)

    assert messages_of(response) == [
        ("warning", f"1 job(s) not retried now: {link(job)} (already due).")
    ]
    assert Job.objects.get(pk=job.pk).run_at == START


@pytest.mark.parametrize("verb", VERBS)
def test_job_page_buttons_need_the_change_permission(staff_client, make_job, verb):
    client = staff_client("view_job", "view_deadletter")
    jobs = {case: make_job(**BUTTON_CASES[case][0]) for case in BUTTON_CASES}
    before = snapshot()

    for job in jobs.values():
        page = client.get(change_url(job))
        assert page.status_code == 200
        assert 'class="django-jobs-verb"' not in page.content.decode()
        assert client.post(verb_url(job, verb)).status_code == 403
    assert snapshot() == before


def test_job_page_button_refuses_a_get(admin_client, make_job):
    job = make_job(run_at=LATER)
    assert admin_client.get(verb_url(job, "run_now")).status_code == 405
    assert Job.objects.get(pk=job.pk).run_at == LATER


def test_job_page_button_needs_the_csrf_token(django_user_model, make_job):
    client = Client(enforce_csrf_checks=True)
    client.force_login(django_user_model.objects.create_superuser("root", "r@example.com", "pw"))
    job = make_job(run_at=LATER)
    page = client.get(change_url(job))
    token = page.context["csrf_token"]

    refused = client.post(verb_url(job, "run_now"))
    assert refused.status_code == 403
    assert Job.objects.get(pk=job.pk).run_at == LATER

    accepted = client.post(verb_url(job, "run_now"), {"csrfmiddlewaretoken": token})
    assert accepted.status_code == 302
    assert Job.objects.get(pk=job.pk).run_at <= timezone.now()


def test_job_list_actions_need_the_csrf_token(django_user_model, make_dead_letter):
    client = Client(enforce_csrf_checks=True)
    client.force_login(django_user_model.objects.create_superuser("root", "r@example.com", "pw"))
    job = make_dead_letter()

    response = post_retry(client, JOBS, [job])

    assert response.status_code == 403
    assert Job.objects.get(pk=job.pk).status == JobStatus.DEAD_LETTERED


def test_dead_letter_page_retry_button_retries_and_goes_to_the_job(admin_client, make_dead_letter):
    job = make_dead_letter()
    dead_letter_page = reverse("admin:django_jobs_deadletter_change", args=[job.pk])
    page = admin_client.get(dead_letter_page).content.decode()
    assert [verb for verb in VERBS if verb_url(job, verb) in page] == ["retry"]

    response = admin_client.post(verb_url(job, "retry"), follow=True)

    assert response.redirect_chain == [(change_url(job), 302)]
    assert messages_of(response) == [("success", "1 job(s) queued again.")]
    assert Job.objects.get(pk=job.pk).status == JobStatus.PENDING


# -- deleting: finished jobs only --------------------------------------------------------------


@pytest.mark.parametrize("status", [JobStatus.PENDING, JobStatus.RUNNING])
def test_job_delete_page_refuses_a_live_job(admin_client, make_job, status):
    job = make_job(status=status)
    delete_url = reverse("admin:django_jobs_job_delete", args=[job.pk])

    page = admin_client.get(change_url(job)).content.decode()
    assert delete_url not in page
    assert admin_client.get(delete_url).status_code == 403
    assert admin_client.post(delete_url, {"post": "yes"}).status_code == 403
    assert Job.objects.filter(pk=job.pk).exists()


def test_job_delete_page_deletes_a_finished_job(admin_client, make_job):
    job = make_job(status=JobStatus.SUCCEEDED, finished_at=START)
    delete_url = reverse("admin:django_jobs_job_delete", args=[job.pk])
    assert delete_url in admin_client.get(change_url(job)).content.decode()

    response = admin_client.post(delete_url, {"post": "yes"})

    assert response.status_code == 302
    assert not Job.objects.filter(pk=job.pk).exists()


def test_delete_selected_deletes_finished_jobs_only_and_reports_the_live_ones(
    admin_client, make_job
):
    running = make_job(status=JobStatus.RUNNING, attempt=1, attempts_used=1)
    pending = make_job()
    finished = make_job(status=JobStatus.SUCCEEDED, finished_at=START)
    selected = {ACTION_CHECKBOX_NAME: [str(job.pk) for job in (running, pending, finished)]}

    confirm = admin_client.post(reverse(JOBS), {"action": "delete_selected", **selected})

    assert confirm.status_code == 200  # Django's confirmation page, for the finished one only
    assert [job.pk for job in confirm.context["queryset"]] == [finished.pk]
    assert messages_of(confirm) == [
        (
            "warning",
            f"2 job(s) not deleted: {link(running)} (it is running), {link(pending)} "
            "(it is pending).",
        )
    ]
    response = admin_client.post(
        reverse(JOBS), {"action": "delete_selected", "post": "yes", **selected}, follow=True
    )
    assert response.status_code == 200
    assert set(Job.objects.values_list("id", flat=True)) == {running.pk, pending.pk}


def test_delete_selected_of_live_jobs_only_deletes_nothing(admin_client, make_job):
    running = make_job(status=JobStatus.RUNNING, attempt=1, attempts_used=1)

    response = post_action(admin_client, JOBS, "delete_selected", [running])

    assert messages_of(response) == [
        ("warning", f"1 job(s) not deleted: {link(running)} (it is running).")
    ]
    assert Job.objects.filter(pk=running.pk).exists()


def test_job_admin_delete_queryset_never_deletes_a_live_job(rf, admin_user, make_job):
    from django.contrib import admin

    live = [make_job(), make_job(status=JobStatus.RUNNING, attempt=1, attempts_used=1)]
    make_job(status=JobStatus.CANCELLED, finished_at=START)
    request = rf.post("/")
    request.user = admin_user

    admin.site.get_model_admin(Job).delete_queryset(request, Job.objects.all())

    assert sorted(Job.objects.values_list("id", flat=True)) == [job.pk for job in live]


def test_delete_selected_leaves_a_job_retried_after_the_confirmation_page(
    admin_client, make_dead_letter
):
    job = make_dead_letter()
    selected = {ACTION_CHECKBOX_NAME: [str(job.pk)]}
    confirm = admin_client.post(reverse(DEAD_LETTERS), {"action": "delete_selected", **selected})
    assert [row.pk for row in confirm.context["queryset"]] == [job.pk]
    Job.objects.filter(pk=job.pk).update(status=JobStatus.PENDING)  # retried meanwhile

    admin_client.post(reverse(JOBS), {"action": "delete_selected", "post": "yes", **selected})

    assert Job.objects.filter(pk=job.pk).exists()


# -- the lists: columns, filters, search, and what they cost ----------------------------------


def cell(page: str, column: str, content: str) -> bool:
    return f'<td class="field-{column}">{content}</td>' in page


def clamped(error: str, shown: str | None = None) -> str:
    """The last error's cell: cut to the column, the whole error in its tooltip."""
    return f'<span class="django-jobs-clamp" title="{error}">{shown or error}</span>'


def under(main: str, second: str) -> str:
    return f'{main}<span class="django-jobs-under">{second}</span>'


def cut(text: str) -> str:
    return f'<span class="django-jobs-cut" title="{text}">{text}</span>'


def cut_start(name: str) -> str:
    """A job's name, cut from its start: its end tells jobs apart."""
    return (
        f'<span class="django-jobs-cut django-jobs-cut-start" title="{name}"><bdi>{name}</bdi>'
        "</span>"
    )


def test_job_changelist_columns_show_status_attempts_times_duration_progress_and_error(
    admin_client, make_job
):
    running = make_job(
        status=JobStatus.RUNNING,
        attempt=2,
        attempts_used=2,
        started_at=START,
        progress_done=40,
        progress_total=100,
        progress_note="rows",
    )
    finished = make_job(
        status=JobStatus.DEAD_LETTERED,
        attempts_used=3,
        started_at=START,
        finished_at=START + timedelta(seconds=1.5),
        last_error="RuntimeError: " + "x" * 500,
        progress_done=7,
    )
    plain = make_job(run_at=START + timedelta(seconds=3))

    with freeze_time(START + timedelta(seconds=75)):
        page = admin_client.get(reverse(JOBS)).content.decode()

    assert (
        '<span class="django-jobs-status django-jobs-status-running" style="color: #fff; '
        'background: #0b5ed7; padding: 1px 6px; border-radius: 3px; white-space: nowrap">'
        "running</span>"
    ) in page
    assert ">dead-lettered</span>" in page
    assert '<span class="django-jobs-under">2/3 attempts</span></td>' in page
    assert '<span class="django-jobs-under">3/3 attempts</span></td>' in page
    assert cell(page, "name_and_queue", under(cut_start("tests.ok"), cut("default")))
    assert cell(page, "run_at_shown", "2026-01-05 12:00:03 UTC")
    bar = (
        '<span class="django-jobs-progress"><progress value="40" max="100">40%</progress>'
        " 40/100 rows</span>"
    )
    assert cell(page, "duration_and_progress", under("running for 1 min 15 s", bar))
    assert cell(
        page,
        "duration_and_progress",
        under("1.5 s", '<span class="django-jobs-progress">7 </span>'),
    )
    error = "RuntimeError: " + "x" * 500
    assert cell(page, "short_error", clamped(error, "RuntimeError: " + "x" * 105 + "…"))
    assert page.count('<td class="field-duration_and_progress"></td>') == 1  # the plain job
    assert {job.pk for job in (running, finished, plain)} <= set(
        Job.objects.values_list("id", flat=True)
    )


def test_job_changelist_times_are_in_the_active_time_zone(admin_client, make_job, settings):
    settings.TIME_ZONE = "Europe/Paris"
    make_job(run_at=START)

    page = admin_client.get(reverse(JOBS)).content.decode()

    assert cell(page, "run_at_shown", "2026-01-05 13:00:00 CET")


def unbounded_counts(queries: list[str]) -> list[str]:
    """COUNTs over the jobs table with no condition and no LIMIT: they read every row."""
    return [
        sql
        for sql in queries
        if "COUNT(" in sql.upper()
        and "django_jobs_job" in sql
        and " WHERE " not in sql.upper()
        and " LIMIT " not in sql.upper()
    ]


def list_queries(client: Client, url: str) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return [query["sql"] for query in captured.captured_queries]


@pytest.mark.parametrize("changelist", [JOBS, DEAD_LETTERS])
@pytest.mark.parametrize(
    "query", ["", "?status=succeeded", "?queue=default&name=tests.ok", "?schedule=x", "?q=ok"]
)
def test_job_lists_run_a_bounded_number_of_queries_and_never_count_the_whole_table(
    admin_client, make_job, make_dead_letter, changelist, query
):
    make_job()
    make_dead_letter()
    few = list_queries(admin_client, reverse(changelist) + query)
    for _ in range(30):
        make_job(status=JobStatus.SUCCEEDED, progress_done=1, progress_total=2)
        make_dead_letter()

    many = list_queries(admin_client, reverse(changelist) + query)

    assert len(many) == len(few) <= 10
    assert unbounded_counts(many) == []
    assert not [sql for sql in many if "DISTINCT" in sql.upper()]


def test_job_changelist_counts_at_most_the_cap(admin_client, make_job, monkeypatch):
    monkeypatch.setattr(common, "COUNT_CAP", 3)
    for _ in range(5):
        make_job()
    assert "3+ jobs" in admin_client.get(reverse(JOBS)).content.decode()
    Job.objects.filter(id__in=list(Job.objects.values_list("id", flat=True)[:3])).delete()
    assert "2 jobs" in admin_client.get(reverse(JOBS)).content.decode()


def test_job_changelist_filter_choices_come_from_the_settings_and_the_registry(
    admin_client, make_job
):
    orphan = make_job(name="old.removed", queue="orphans")
    make_job()

    response = admin_client.get(reverse(JOBS))

    page = response.content.decode()
    for choice in ("?queue=default", "?queue=emails", "?name=tests.ok", "?name=tests.emails"):
        assert choice in page
    for stale in ("?queue=orphans", "?name=old.removed"):
        assert stale not in page  # not read from the table
    assert "?name=django_jobs.task" not in page  # the package's own, never enqueued
    for query in ("?queue=orphans", "?name=old.removed", "?queue=orphans&name=old.removed"):
        listed = admin_client.get(reverse(JOBS) + query).context["cl"].result_list
        assert [job.pk for job in listed] == [orphan.pk]


def test_job_changelist_status_filter_lists_every_status(admin_client, make_job):
    dead = make_job(status=JobStatus.DEAD_LETTERED)
    make_job()
    page = admin_client.get(reverse(JOBS)).content.decode()
    for status in JobStatus.values:
        assert f"?status__exact={status}" in page
    listed = admin_client.get(reverse(JOBS) + "?status__exact=dead_lettered").context["cl"]
    assert [job.pk for job in listed.result_list] == [dead.pk]


def test_job_changelist_lists_the_jobs_a_schedule_fired(admin_client, make_job):
    RecurringJob.objects.create(name="nightly", job_name="tests.ok", cron="0 3 * * *")
    fired = [make_job(schedule="nightly") for _ in range(2)]
    make_job(schedule="hourly")
    make_job()
    gone = make_job(schedule="removed-since")

    choices = admin_client.get(reverse(JOBS)).content.decode()
    response = admin_client.get(reverse(JOBS) + "?schedule=nightly")

    assert '<a href="?schedule=nightly">nightly</a>' in choices  # from RecurringJob
    assert "?schedule=hourly" not in choices  # not from the jobs table
    assert response.status_code == 200
    assert [job.pk for job in response.context["cl"].result_list] == [fired[1].pk, fired[0].pk]
    listed = admin_client.get(reverse(JOBS) + "?schedule=removed-since").context["cl"]
    assert [job.pk for job in listed.result_list] == [gone.pk]


@pytest.mark.parametrize("term", ["{id}", "#{id}", " {id} "])
def test_job_changelist_search_by_number_finds_that_job(admin_client, make_job, term):
    wanted = make_job()
    make_job(unique_key=str(wanted.pk), name=f"tests.{wanted.pk}")

    response = admin_client.get(reverse(JOBS), {"q": term.format(id=wanted.pk)})

    assert [job.pk for job in response.context["cl"].result_list] == [wanted.pk]


@pytest.mark.parametrize("term", ["\u00b2", "#\u00b2", "\u0661\u0660"], ids=repr)
def test_job_changelist_search_by_digits_that_are_not_ascii_is_a_word(admin_client, term):
    """``'²'.isdigit()`` is true and ``int('²')`` raises: the search failed with a 500."""
    for url in (reverse(JOBS), reverse(DEAD_LETTERS)):
        assert admin_client.get(url, {"q": term}).status_code == 200


@pytest.mark.parametrize(("term", "match"), [("emails", "by_name"), ("invoice-7", "by_key")])
def test_job_changelist_search_by_words_looks_at_name_and_unique_key(
    admin_client, make_job, term, match
):
    jobs = {
        "by_name": make_job(name="tests.emails"),
        "by_key": make_job(unique_key="invoice-7"),
        "neither": make_job(),
    }
    response = admin_client.get(reverse(JOBS), {"q": term})
    assert [job.pk for job in response.context["cl"].result_list] == [jobs[match].pk]


def test_job_changelist_search_reads_no_like_over_the_table(admin_client, make_job):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    make_job(name="tests.emails")
    for term in ("emails", "#12", str(2**64)):
        with CaptureQueriesContext(connection) as captured:
            assert admin_client.get(reverse(JOBS), {"q": term}).status_code == 200
        jobs_sql = [q["sql"] for q in captured.captured_queries if "django_jobs_job" in q["sql"]]
        assert not [sql for sql in jobs_sql if " LIKE " in sql.upper()], jobs_sql


# -- the change page ---------------------------------------------------------------------------


def test_job_change_page_shows_progress_duration_result_and_times_with_seconds(
    admin_client, make_job
):
    job = make_job(
        status=JobStatus.SUCCEEDED,
        attempt=1,
        attempts_used=1,
        started_at=START,
        finished_at=START + timedelta(minutes=3, seconds=5),
        result={"rows": 12},
        progress_done=12,
        progress_total=12,
        progress_note="imported",
    )
    Attempt.objects.create(
        job=job,
        number=1,
        owner="web-1:42:ab",
        started_at=START,
        finished_at=START + timedelta(minutes=3, seconds=5),
        outcome=AttemptOutcome.SUCCEEDED,
    )

    page = re.sub(r">\s+<", "><", admin_client.get(change_url(job)).content.decode())

    assert '<progress value="12" max="12">100%</progress> 12/12 imported' in page
    assert '<div class="readonly">3 min 5 s</div>' in page
    assert '<div class="readonly">2026-01-05 12:03:05 UTC</div>' in page  # finished at
    assert "{&quot;rows&quot;: 12}" in page  # the result
    assert '<td class="field-duration"><p>3 min 5 s</p></td>' in page  # the attempt's
    assert '<td class="field-started"><p>2026-01-05 12:00:00 UTC</p></td>' in page
    assert '<td class="field-outcome"><p>succeeded</p></td>' in page


def test_job_change_page_shows_every_field_that_holds_something(admin_client, make_job, clock):
    now = clock.now()
    job = make_job(
        **{"unique_key": "every-field", "progress_note": "a note", "progress_done": 1},
        **{"lease_owner": "w", "lease_expires_at": now, "cancel_requested_at": now},
        **{"result": {"rows": 1}, "schedule": "nightly", "concurrency_key": "k"},
        **{"concurrency_limit": 2, "started_at": now, "finished_at": now},
        trace_context={"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
        last_error="ValueError: no",
        batch=Batch.objects.create(),
    )
    labels = admin_client.get(change_url(job)).content.decode()
    for field in Job._meta.fields:
        if field.name in common.RUNTIME_MARKS:
            continue
        label = field.verbose_name if field.name not in common.PROGRESS_FIELDS else "progress"
        if field.name == "last_error":
            assert '<p class="django-jobs-error">ValueError: no</p>' in labels  # at the top
        else:
            assert f">{label.capitalize()}:</label>" in labels, field.name


def test_job_change_page_leaves_out_the_fields_that_hold_nothing(admin_client, make_job):
    labels = admin_client.get(change_url(make_job())).content.decode()
    for label in ("Unique key", "Lease owner", "Result", "Schedule", "Finished at", "Progress"):
        assert f">{label}:</label>" not in labels
    for label in ("Name", "Queue", "Payload", "Status", "Max attempts", "Run at"):
        assert f">{label}:</label>" in labels
    assert "Last error</h2>" not in labels  # no error: no failure block


def test_dead_letter_page_shows_the_error_and_the_last_traceback_first(admin_client, make_job):
    job = make_job(status=JobStatus.DEAD_LETTERED, last_error="KeyError: 'sku'", attempt=2)
    trace = "  File \"shop/jobs.py\", line 3, in sync\n    stock[payload['sku']]\n          ^^^^^"
    for number, text in ((1, "first"), (2, trace)):
        Attempt.objects.create(
            job=job,
            number=number,
            owner="w",
            started_at=job.run_at,
            traceback=text,
            outcome=AttemptOutcome.FAILED,
            error="KeyError: 'sku'",
        )
    page = admin_client.get(reverse(DEAD_LETTER_CHANGE, args=[job.pk])).content.decode()
    failure = page.index('class="module aligned django-jobs-failure"')
    assert failure < page.index("<fieldset", failure + 1)  # before the job's fields
    assert "Traceback of attempt 2" in page
    assert '<pre class="django-jobs-trace">' + escape(trace) + "</pre>" in page  # open, as is
    assert page.count('<details class="django-jobs-traceback">') == 2  # each attempt's, folded


# -- dead letters --------------------------------------------------------------------------------


def test_dead_letters_changelist_shows_age_attempts_and_the_error(admin_client, make_dead_letter):
    make_dead_letter(finished_at=START, last_error="RuntimeError: boom 3")

    with freeze_time(START + timedelta(hours=3, minutes=5, seconds=20)):
        page = admin_client.get(reverse(DEAD_LETTERS)).content.decode()

    assert cell(page, "age", "3 h 5 min")
    assert cell(page, "finished_at_shown", "2026-01-05 12:00:00 UTC")
    assert cell(page, "attempts", "3/3")
    assert cell(page, "short_error", clamped("RuntimeError: boom 3"))


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0.25, "250 ms"),
        (1.5, "1.5 s"),
        (42, "42 s"),
        (60, "1 min"),
        (185, "3 min 5 s"),
        (3 * 3600 + 5 * 60 + 20, "3 h 5 min"),
        (7200, "2 h"),
        (2 * 86400 + 4 * 3600 + 59, "2 d 4 h"),
        (-3, "0 ms"),
    ],
)
def test_format_duration_shows_two_units_at_most(seconds, shown):
    assert format_duration(timedelta(seconds=seconds)) == shown


def test_run_now_and_retry_now_selected_say_a_due_job_is_already_due(admin_client, make_job):
    due = [make_job(run_at=START), make_job(run_at=START, attempt=1, attempts_used=1)]

    for action, what in (("run_now_selected", "run now"), ("retry_now_selected", "retried now")):
        response = post_action(admin_client, JOBS, action, due)
        reasons = ", ".join(f"{link(job)} (already due)" for job in due)
        assert messages_of(response) == [("warning", f"2 job(s) not {what}: {reasons}.")]


@pytest.mark.parametrize(
    ("status", "shown"),
    [
        (JobStatus.SUCCEEDED, '<progress value="12" max="12">100%</progress> 12/12 rows'),
        (JobStatus.DEAD_LETTERED, '<progress value="5" max="12">41%</progress> 5/12 rows'),
    ],
)
def test_job_page_shows_a_succeeded_jobs_progress_complete(admin_client, make_job, status, shown):
    """A report made just before the handler returned may not have reached the row (the
    heartbeat writes reports): a succeeded job's bar is complete all the same; a failed
    one's stops where its last written report said."""
    job = make_job(status=status, progress_done=5, progress_total=12, progress_note="rows")
    page = re.sub(r">\s+<", "><", admin_client.get(change_url(job)).content.decode())
    assert shown in page

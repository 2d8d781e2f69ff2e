"""The admin, through the test client: jobs, dead letters and the retry action."""

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Permission
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_jobs.models import Attempt, AttemptOutcome, Job, JobStatus

pytestmark = pytest.mark.django_db

DEAD_LETTERS = "admin:django_jobs_deadletter_changelist"
JOBS = "admin:django_jobs_job_changelist"
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


def post_retry(client: Client, changelist: str, jobs: list[Job]) -> Any:
    return client.post(
        reverse(changelist),
        {
            "action": "retry_selected",
            "index": "0",
            "select_across": "0",
            ACTION_CHECKBOX_NAME: [str(job.pk) for job in jobs],
        },
        follow=True,
    )


def messages_of(response: Any) -> list[tuple[str, str]]:
    return [(message.level_tag, message.message) for message in get_messages(response.wsgi_request)]


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


@pytest.fixture
def staff_client(client: Client, django_user_model: Any) -> Callable[..., Client]:
    """Log ``client`` in as a staff user who has only the given django_jobs permissions."""

    def login(*codenames: str) -> Client:
        user = django_user_model.objects.create_user("staff", password="unused", is_staff=True)
        permissions = Permission.objects.filter(
            content_type__app_label="django_jobs", codename__in=codenames
        )
        assert permissions.count() == len(codenames)
        user.user_permissions.set(permissions)
        client.force_login(user)
        return client

    return login


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
    assert "ValueError: " + "x" * 107 + "…" in page
    assert "x" * 108 not in page


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


def test_retry_selected_leaves_jobs_that_are_not_dead_lettered(admin_client, make_job):
    jobs = [
        make_job(status=status) for status in JobStatus.values if status != JobStatus.DEAD_LETTERED
    ]
    before = snapshot()

    response = post_retry(admin_client, JOBS, jobs)

    assert response.status_code == 200
    assert (
        "warning",
        f"{len(jobs)} job(s) skipped: not dead-lettered, or a live job has the same unique key.",
    ) in messages_of(response)
    assert snapshot() == before


def test_retry_selected_leaves_dead_letter_whose_unique_key_is_live(
    admin_client, make_job, make_dead_letter
):
    make_job(status=JobStatus.PENDING, unique_key="invoice-7")
    dead = make_dead_letter(unique_key="invoice-7")
    before = snapshot()

    response = post_retry(admin_client, DEAD_LETTERS, [dead])

    assert response.status_code == 200
    assert any(level == "warning" for level, _ in messages_of(response))
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


def post_cancel(client: Client, jobs: list[Job]) -> Any:
    return client.post(
        reverse("admin:django_jobs_job_changelist"),
        {
            "action": "cancel_selected",
            "index": "0",
            "select_across": "0",
            ACTION_CHECKBOX_NAME: [str(job.pk) for job in jobs],
        },
        follow=True,
    )


def test_admin_cancel_action_cancels_pending_asks_running_and_skips_finished(
    admin_client: Client, make_job: Callable[..., Job]
) -> None:
    pending = make_job()
    running = make_job(status=JobStatus.RUNNING, lease_owner="w1", attempt=1, attempts_used=1)
    finished = make_job(status=JobStatus.SUCCEEDED)
    response = post_cancel(admin_client, [pending, running, finished])
    assert messages_of(response) == [
        ("success", "1 job(s) cancelled."),
        (
            "success",
            "1 running job(s) asked to stop: their workers cancel them at their next heartbeat.",
        ),
        ("warning", "1 job(s) skipped: already finished."),
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
    from django.contrib.auth.models import Permission

    viewer = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_job"))
    client.force_login(viewer)
    job = make_job()
    post_cancel(client, [job])
    assert Job.objects.get(pk=job.pk).status == JobStatus.PENDING

"""The admin, through the test client: workers and recurring schedules.

The job and dead-letter pages are tested in ``test_admin_jobs.py``."""

from typing import Any

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.urls import reverse
from django.utils import timezone
from freezegun import freeze_time

from django_jobs import add_recurring_job
from django_jobs.models import Job, JobStatus, RecurringJob
from tests.integration.test_recurring import T0, at, scheduler_fires_after_next_read

pytestmark = pytest.mark.django_db


def test_worker_changelist_lists_live_workers_with_their_running_jobs(admin_client, make_job):
    from django_jobs.worker.processes import register_worker

    register_worker("web-1:4242:abcd", ["default", "emails"], timezone.now(), "default")
    make_job(status=JobStatus.RUNNING, lease_owner="web-1:4242:abcd")
    response = admin_client.get(reverse("admin:django_jobs_worker_changelist"))
    assert response.status_code == 200
    content = response.content.decode()
    assert "web-1:4242:abcd" in content
    assert '<td class="field-running">1</td>' in content


# Recurring schedules: the edit form and the enable action.

RECURRING_CHANGELIST = "admin:django_jobs_recurringjob_changelist"


def schedule_form(**overrides: Any) -> dict[str, Any]:
    return {
        "name": "nightly",
        "job_name": "tests.ok",
        "cron": "* * * * *",
        "timezone": "UTC",
        "payload": "null",
        "queue": "",
        "priority": "",
        "max_attempts": "",
        "enabled": "on",
        "overlap": "on",
        **overrides,
    }


@pytest.fixture
def minutely() -> Any:
    with freeze_time(T0):  # 12:00:30; next run 12:01
        return add_recurring_job("nightly", "* * * * *", "tests.ok")


def test_admin_recurring_saving_an_unchanged_form_after_a_fire_keeps_next_run_at(
    admin_client, minutely
):
    change = reverse("admin:django_jobs_recurringjob_change", args=[minutely.pk])
    # The scheduler fires 12:01 after the admin has read the row, before it saves.
    with scheduler_fires_after_next_read(at(1)):
        response = admin_client.post(change, schedule_form())
    assert response.status_code == 302
    schedule = RecurringJob.objects.get()
    assert (schedule.next_run_at, schedule.last_run_at) == (at(1.5), at(0.5))
    assert Job.objects.count() == 1


def test_admin_recurring_changed_cron_restarts_from_now(admin_client, minutely):
    change = reverse("admin:django_jobs_recurringjob_change", args=[minutely.pk])
    with freeze_time(at(3)):
        response = admin_client.post(change, schedule_form(cron="*/10 * * * *", queue="emails"))
    assert response.status_code == 302
    schedule = RecurringJob.objects.get()
    assert (schedule.cron, schedule.queue) == ("*/10 * * * *", "emails")
    assert schedule.next_run_at == T0.replace(minute=10, second=0)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("cron", "0 0 30 2 *", "never fires"),
        ("cron", "0 25 * * *", "hour &#x27;25&#x27; is out of range 0-23"),
        ("max_attempts", "0", "max_attempts must be a positive integer, got 0"),
    ],
)
def test_admin_recurring_form_refuses_a_schedule_that_could_never_fire(
    admin_client, minutely, field, value, message
):
    change = reverse("admin:django_jobs_recurringjob_change", args=[minutely.pk])
    response = admin_client.post(change, schedule_form(**{field: value}))
    assert response.status_code == 200  # the form again, with the error: not a 500
    assert message in response.content.decode()
    assert RecurringJob.objects.get().cron == "* * * * *"
    add = reverse("admin:django_jobs_recurringjob_add")
    response = admin_client.post(add, schedule_form(name="another", **{field: value}))
    assert response.status_code == 200
    assert message in response.content.decode()
    assert RecurringJob.objects.count() == 1


def test_admin_recurring_enable_restarts_from_now(admin_client, minutely):
    RecurringJob.objects.update(enabled=False)
    changelist = reverse(RECURRING_CHANGELIST)
    with freeze_time(at(30)):
        admin_client.post(changelist, {"action": "enable", ACTION_CHECKBOX_NAME: [minutely.pk]})
    schedule = RecurringJob.objects.get()
    assert (schedule.enabled, schedule.next_run_at) == (True, at(30.5))

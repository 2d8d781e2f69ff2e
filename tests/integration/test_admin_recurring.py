"""The recurring-jobs page, through the test client: the form, the columns, Run now."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Permission
from django.contrib.messages import get_messages
from django.db import connection
from django.db.models import Model
from django.test import Client, RequestFactory
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from freezegun import freeze_time

from django_jobs import add_recurring_job
from django_jobs.models import Job, JobStatus, RecurringJob
from django_jobs.registry import registered_names, user_names
from tests.integration.test_recurring import T0, at, scheduler_fires_after_next_read
from tests.support.plans import analyze, mysql_plan

pytestmark = pytest.mark.django_db

UTC = timezone.utc
CHANGELIST = "admin:django_jobs_recurringjob_changelist"


def change_url(schedule: RecurringJob) -> str:
    return reverse("admin:django_jobs_recurringjob_change", args=[schedule.pk])


def run_now_url(schedule: RecurringJob) -> str:
    return reverse("admin:django_jobs_recurringjob_run_now", args=[schedule.pk])


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


def messages_of(response: Any) -> list[tuple[str, str]]:
    return [(message.level_tag, message.message) for message in get_messages(response.wsgi_request)]


def changelist(client: Client, now: datetime = T0) -> Any:
    with freeze_time(now):
        response = client.get(reverse(CHANGELIST))
    assert response.status_code == 200
    return response


def cell(response: Any, name: str, column: str) -> str:
    """The HTML inside ``column``'s cell in the row of schedule ``name``."""
    page = response.content.decode()
    row = page[page.index(f">{name}</a></th>") :]
    start = row.index(f'class="field-{column}"')
    return row[row.index(">", start) + 1 : row.index("</td>", start)]


def readonly(response: Any, field: str) -> str:
    """The HTML of a read-only field on the change form."""
    page = response.content.decode()
    start = page.index(f"field-{field}")
    start = page.index('<div class="readonly">', start) + len('<div class="readonly">')
    return page[start : page.index("</div>\n", start)]


@pytest.fixture
def minutely() -> Any:
    with freeze_time(T0):  # 12:00:30; next run 12:01
        return add_recurring_job("nightly", "* * * * *", "tests.ok")


@pytest.fixture
def staff(client: Client, django_user_model: Any) -> Callable[..., Client]:
    """``client`` logged in as staff with only the given django_jobs permissions."""

    def login(*codenames: str) -> Client:
        user = django_user_model.objects.create_user("staff", password="unused", is_staff=True)
        user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
        client.force_login(user)
        return client

    return login


# -- the edit form -------------------------------------------------------------


def test_admin_recurring_saving_an_unchanged_form_after_a_fire_keeps_next_run_at(
    admin_client, minutely
):
    # The scheduler fires 12:01 after the admin has read the row, before it saves.
    with scheduler_fires_after_next_read(at(1)):
        response = admin_client.post(change_url(minutely), schedule_form())
    assert response.status_code == 302
    schedule = RecurringJob.objects.get()
    assert (schedule.next_run_at, schedule.last_run_at) == (at(1.5), at(0.5))
    assert Job.objects.count() == 1


def test_admin_recurring_changed_cron_restarts_from_now(admin_client, minutely):
    with freeze_time(at(3)):
        response = admin_client.post(
            change_url(minutely), schedule_form(cron="*/10 * * * *", queue="emails")
        )
    assert response.status_code == 302
    schedule = RecurringJob.objects.get()
    assert (schedule.cron, schedule.queue) == ("*/10 * * * *", "emails")
    assert schedule.next_run_at == T0.replace(minute=10, second=0)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("cron", "0 0 30 2 *", "never fires"),
        ("cron", "0 2 * *", "not a valid cron expression"),
        ("cron", "0 25 * * *", "hour &#x27;25&#x27; is out of range 0-23"),
        ("timezone", "Mars/Olympus", "unknown time zone"),
        ("max_attempts", "0", "max_attempts must be a positive integer, got 0"),
    ],
)
def test_admin_recurring_form_refuses_a_schedule_that_could_never_fire(
    admin_client, minutely, field, value, message
):
    response = admin_client.post(change_url(minutely), schedule_form(**{field: value}))
    assert response.status_code == 200  # the form again, with the error: not a 500
    assert message in response.content.decode()
    assert RecurringJob.objects.get().cron == "* * * * *"
    add = reverse("admin:django_jobs_recurringjob_add")
    response = admin_client.post(add, schedule_form(name="another", **{field: value}))
    assert response.status_code == 200
    assert message in response.content.decode()
    assert RecurringJob.objects.count() == 1


def test_admin_recurring_form_offers_the_registered_job_names(admin_client):
    response = admin_client.get(reverse("admin:django_jobs_recurringjob_add"))

    field = response.context["adminform"].form.fields["job_name"]
    assert [value for value, _ in field.choices] == ["", *user_names()]
    assert "django_jobs.task" in registered_names()  # the package's own runs its old rows,
    assert "django_jobs.task" not in user_names()  # but is not offered
    assert '<select name="job_name"' in response.content.decode()
    refused = admin_client.post(
        reverse("admin:django_jobs_recurringjob_add"), schedule_form(job_name="no.such.job")
    )
    assert refused.status_code == 200
    assert "Select a valid choice. no.such.job is not one of the available choices." in (
        refused.content.decode()
    )
    assert not RecurringJob.objects.exists()


def test_admin_recurring_form_keeps_and_flags_a_stored_job_name_no_longer_registered(
    admin_client, minutely
):
    RecurringJob.objects.update(job_name="reports.retired")  # its handler was removed

    page = admin_client.get(change_url(minutely)).content.decode()

    assert '<option value="reports.retired" selected>reports.retired (not registered)' in page
    assert "<strong>&#x27;reports.retired&#x27; is not registered</strong>" in page
    listed = changelist(admin_client)
    assert "(not registered)" in cell(listed, "nightly", "job")
    # Another change saves and keeps the name; choosing another unregistered one is refused.
    with freeze_time(at(3)):
        saved = admin_client.post(
            change_url(minutely), schedule_form(job_name="reports.retired", enabled="")
        )
    assert saved.status_code == 302
    assert RecurringJob.objects.values_list("job_name", "enabled").get() == (
        "reports.retired",
        False,
    )
    refused = admin_client.post(change_url(minutely), schedule_form(job_name="reports.other"))
    assert refused.status_code == 200
    assert RecurringJob.objects.get().job_name == "reports.retired"
    # Once a registered job is chosen, the flag goes.
    assert admin_client.post(change_url(minutely), schedule_form()).status_code == 302
    assert "(not registered)" not in admin_client.get(change_url(minutely)).content.decode()


def test_admin_recurring_escapes_a_stored_job_name(admin_client, minutely):
    RecurringJob.objects.update(job_name="<b>hand-edited</b>")

    form = admin_client.get(change_url(minutely)).content.decode()
    listed = changelist(admin_client).content.decode()

    for page in (form, listed):
        assert "<b>hand-edited</b>" not in page
        assert "&lt;b&gt;hand-edited&lt;/b&gt;" in page


# -- when it runs next ----------------------------------------------------------


@pytest.fixture
def new_york() -> RecurringJob:
    with freeze_time(T0):  # 07:00:30 in New York
        return add_recurring_job("ny-report", "0 19 * * *", "tests.ok", timezone="America/New_York")


def test_admin_recurring_shows_the_next_run_in_its_zone_and_in_utc(
    admin_client, new_york, minutely
):
    listed = changelist(admin_client)

    both = "2026-01-05 19:00:00 EST<br>2026-01-06 00:00:00 UTC"
    assert cell(listed, "ny-report", "next_run") == both
    assert cell(listed, "nightly", "next_run") == "2026-01-05 12:01:00 UTC"  # UTC: once
    assert cell(listed, "ny-report", "cron_in_zone") == (
        '0 19 * * *<br><span class="quiet">America/New_York</span>'
    )
    with freeze_time(T0):
        form = admin_client.get(change_url(new_york))
    assert readonly(form, "next_run") == both


def test_admin_recurring_next_run_of_a_disabled_schedule_is_empty(admin_client, minutely):
    RecurringJob.objects.update(enabled=False, next_run_at=None)

    assert cell(changelist(admin_client), "nightly", "next_run") == "-"


def test_admin_recurring_previews_the_next_five_runs_across_a_dst_change(admin_client):
    # 2026-03-08: New York's clocks jump from 02:00 EST to 03:00 EDT; 02:30 does not exist.
    friday = datetime(2026, 3, 6, 5, 0, tzinfo=UTC)  # 00:00 EST
    with freeze_time(friday):
        schedule = add_recurring_job(
            "night-batch", "30 2 * * *", "tests.ok", timezone="America/New_York"
        )
        response = admin_client.get(change_url(schedule))

    assert readonly(response, "upcoming") == "".join(
        f"<div>{run}</div>"
        for run in (
            "2026-03-06 02:30:00 EST",
            "2026-03-07 02:30:00 EST",
            "2026-03-08 03:00:00 EDT",
            "2026-03-09 02:30:00 EDT",
            "2026-03-10 02:30:00 EDT",
        )
    )


@pytest.mark.parametrize(
    ("stored", "message"),
    [
        ({"cron": "0 0 30 2 *"}, "No preview: &#x27;0 0 30 2 *&#x27; has no occurrence after"),
        ({"cron": "every day"}, "No preview: &#x27;every day&#x27; is not a valid cron"),
        ({"timezone": "Mars/Olympus"}, "No preview: unknown time zone &#x27;Mars/Olympus&#x27;"),
    ],
)
def test_admin_recurring_preview_of_a_schedule_edited_by_hand_to_nonsense_says_so(
    admin_client, minutely, stored, message
):
    RecurringJob.objects.update(**stored)

    response = admin_client.get(change_url(minutely))

    assert response.status_code == 200
    assert readonly(response, "upcoming").startswith(message)
    assert response.status_code == 200 and changelist(admin_client).status_code == 200


def test_admin_recurring_preview_reads_the_saved_cron_not_a_refused_post(admin_client, minutely):
    with freeze_time(T0):
        response = admin_client.post(
            change_url(minutely), schedule_form(cron="0 3 * * *", max_attempts="0")
        )

    assert response.status_code == 200  # refused: max_attempts
    assert readonly(response, "upcoming").startswith(
        "<div>2026-01-05 12:01:00 UTC</div><div>2026-01-05 12:02:00 UTC</div>"
    )


def test_admin_recurring_add_form_has_no_preview_yet(admin_client):
    response = admin_client.get(reverse("admin:django_jobs_recurringjob_add"))

    assert response.status_code == 200
    assert readonly(response, "upcoming") == "Shown once the schedule is saved."
    assert "run-now" not in response.content.decode()


# -- how it last ran, and the jobs it fired --------------------------------------


def test_admin_recurring_shows_the_status_of_the_newest_job_it_fired(
    admin_client, make_job, minutely, new_york
):
    make_job(schedule="nightly", status=JobStatus.SUCCEEDED)
    newest = make_job(schedule="nightly", status=JobStatus.DEAD_LETTERED)
    make_job(schedule="another", status=JobStatus.RUNNING)  # another schedule's, newer still
    make_job(status=JobStatus.CANCELLED)  # not fired by a schedule

    listed = changelist(admin_client)

    assert cell(listed, "nightly", "last_outcome") == (
        f'<a class="jobs-status-dead_lettered" href="/admin/django_jobs/job/{newest.pk}/change/">'
        f"dead-lettered #{newest.pk}</a>"
    )
    assert cell(listed, "ny-report", "last_outcome") == "-"  # never ran
    form = admin_client.get(change_url(minutely))
    assert f"dead-lettered #{newest.pk}" in readonly(form, "last_outcome")


def test_admin_recurring_form_shows_the_last_fired_occurrence_in_its_zone(admin_client, new_york):
    never = admin_client.get(change_url(new_york))
    RecurringJob.objects.update(last_run_at=datetime(2026, 1, 5, 0, 0, tzinfo=UTC))

    fired = admin_client.get(change_url(new_york))

    assert (readonly(never, "last_fired"), readonly(never, "last_outcome")) == ("-", "-")
    assert readonly(fired, "last_fired") == "2026-01-04 19:00:00 EST<br>2026-01-05 00:00:00 UTC"


def test_admin_recurring_links_to_the_job_changelist_filtered_on_the_schedule(
    admin_client, make_job
):
    with freeze_time(T0):
        add_recurring_job("reports & more", "@daily", "tests.ok")
    mine = make_job(schedule="reports & more")
    make_job(schedule="reports")
    make_job()

    link = cell(changelist(admin_client), "reports &amp; more", "jobs")

    href = "/admin/django_jobs/job/?schedule=reports+%26+more"
    assert link == f'<a href="{href}">jobs</a>'
    jobs = admin_client.get(href)
    assert jobs.status_code == 200
    assert [job.pk for job in jobs.context["cl"].result_list] == [mine.pk]


def page_queries(client: Client) -> int:
    with CaptureQueriesContext(connection) as queries:
        changelist(client)
    return len(queries)


def test_admin_recurring_changelist_makes_as_many_queries_for_six_schedules_as_for_one(
    admin_client, make_job
):
    def add(index: int) -> None:
        with freeze_time(T0):
            add_recurring_job(f"s{index}", "@hourly", "tests.ok", timezone="Europe/Paris")
        make_job(schedule=f"s{index}", status=JobStatus.SUCCEEDED)
        make_job(schedule=f"s{index}", status=JobStatus.PENDING)

    add(0)
    one = page_queries(admin_client)
    for index in range(1, 6):
        add(index)

    six = page_queries(admin_client)

    assert six == one
    assert "pending #" in cell(changelist(admin_client), "s5", "last_outcome")


# -- run now ----------------------------------------------------------------------


def test_admin_recurring_run_now_button_enqueues_one_job_and_leaves_the_schedule(
    admin_client, new_york
):
    with freeze_time(T0):
        page = admin_client.get(change_url(new_york)).content.decode()
    assert f'<form method="post" action="{run_now_url(new_york)}"' in page

    with freeze_time(at(1)):
        response = admin_client.post(run_now_url(new_york))

    assert response.status_code == 302
    assert response["Location"] == change_url(new_york)
    job = Job.objects.get()
    assert (job.name, job.schedule, job.status) == ("tests.ok", "ny-report", JobStatus.PENDING)
    job_url = reverse("admin:django_jobs_job_change", args=[job.pk])
    assert messages_of(response) == [
        ("success", f'1 job(s) enqueued: <a href="{job_url}">tests.ok #{job.pk}</a>.')
    ]
    schedule = RecurringJob.objects.get()
    assert (schedule.next_run_at, schedule.last_run_at) == (new_york.next_run_at, None)


def test_admin_recurring_run_now_by_get_does_nothing(admin_client, minutely):
    response = admin_client.get(run_now_url(minutely))

    assert response.status_code == 405
    assert not Job.objects.exists()


def test_admin_recurring_run_now_needs_the_csrf_token(admin_user, minutely):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)

    response = client.post(run_now_url(minutely))

    assert response.status_code == 403
    assert not Job.objects.exists()


def test_admin_recurring_run_now_needs_the_change_permission(staff, minutely):
    client = staff("view_recurringjob")

    page = client.get(change_url(minutely))
    response = client.post(run_now_url(minutely))
    listed = client.get(reverse(CHANGELIST))

    assert page.status_code == 200
    assert "run-now" not in page.content.decode()
    assert response.status_code == 403
    assert "run_now" not in listed.content.decode()  # nor the list action
    assert not Job.objects.exists()


def test_admin_recurring_run_now_with_the_change_permission(staff, minutely):
    client = staff("view_recurringjob", "change_recurringjob")

    assert "run-now" in client.get(change_url(minutely)).content.decode()
    assert client.post(run_now_url(minutely)).status_code == 302
    assert Job.objects.get().schedule == "nightly"


def test_admin_recurring_run_now_of_a_schedule_that_cannot_make_a_job_says_why(
    admin_client, minutely
):
    RecurringJob.objects.update(job_name="reports.retired")

    response = admin_client.post(run_now_url(minutely), follow=True)

    assert response.status_code == 200
    ((level, message),) = messages_of(response)
    assert level == "error"
    assert message.startswith("Schedule 'nightly' not run: no job is registered under the name")
    assert not Job.objects.exists()


def test_admin_recurring_run_now_of_a_missing_schedule_is_404(admin_client):
    url = reverse("admin:django_jobs_recurringjob_run_now", args=[999])

    assert admin_client.post(url).status_code == 404


def test_admin_recurring_list_actions_run_now_enable_disable(admin_client):
    with freeze_time(T0):
        schedule = add_recurring_job("admin-made", "@daily", "tests.ok", {"a": 1})
    url = reverse(CHANGELIST)

    def act(action: str) -> Any:
        return admin_client.post(url, {"action": action, ACTION_CHECKBOX_NAME: [schedule.pk]})

    ran = act("run_now")
    job = Job.objects.get()
    assert (job.payload, job.schedule) == ({"a": 1}, "admin-made")
    job_url = reverse("admin:django_jobs_job_change", args=[job.pk])
    assert messages_of(ran) == [
        ("success", f'1 job(s) enqueued: <a href="{job_url}">tests.ok #{job.pk}</a>.')
    ]
    schedule.refresh_from_db()
    assert schedule.next_run_at == datetime(2026, 1, 6, 0, 0, tzinfo=UTC)  # not moved
    act("disable")
    assert not RecurringJob.objects.get().enabled
    with freeze_time(at(30)):
        act("enable")
    schedule.refresh_from_db()
    assert (schedule.enabled, schedule.next_run_at) == (True, datetime(2026, 1, 6, tzinfo=UTC))


def test_admin_recurring_enable_restarts_from_now(admin_client, minutely):
    RecurringJob.objects.update(enabled=False)
    with freeze_time(at(30)):
        admin_client.post(
            reverse(CHANGELIST), {"action": "enable", ACTION_CHECKBOX_NAME: [minutely.pk]}
        )
    schedule = RecurringJob.objects.get()
    assert (schedule.enabled, schedule.next_run_at) == (True, at(30.5))


@contextmanager
def tables_of_their_own(*models: type[Model]) -> Iterator[None]:
    """Fresh tables for ``models``, for a test that fills them and runs ANALYZE.

    PostgreSQL writes a table's size estimates in place, outside the transaction the
    test rolls back, so filling the shared tables would skew the plans of the tests that
    follow: there the models get tables in a schema of their own, gone with the test's
    transaction. SQLite keeps its statistics in a table, rolled back with the rest.
    """
    if connection.vendor != "postgresql":
        yield
        return
    with connection.cursor() as cursor:
        cursor.execute("SHOW search_path")
        (search_path,) = cursor.fetchone()
        cursor.execute("CREATE SCHEMA plan_probe")
        cursor.execute(f"SET LOCAL search_path TO plan_probe, {search_path}")
    with connection.schema_editor() as editor:
        for model in models:
            editor.create_model(model)
    yield
    with connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL search_path TO {search_path}")


def test_admin_recurring_last_outcome_reads_the_schedule_index_even_for_one_never_fired(
    admin_user, make_job
):
    # Most jobs fired by no schedule, the rest by two busy ones, and schedules that never
    # fired: reading the newest job by the primary key would scan every row for those.
    table = connection.ops.quote_name(Job._meta.db_table)
    columns = ", ".join(
        connection.ops.quote_name(field.column)
        for field in Job._meta.concrete_fields
        if not field.primary_key
    )
    request = RequestFactory().get(reverse(CHANGELIST))
    request.user = admin_user
    with tables_of_their_own(Job, RecurringJob):
        for index in range(20):
            with freeze_time(T0):
                add_recurring_job(f"s{index:02}", "@hourly", "tests.ok")
        make_job(schedule="s00", status=JobStatus.SUCCEEDED)
        make_job(schedule="s01", status=JobStatus.SUCCEEDED)
        make_job(status=JobStatus.SUCCEEDED)
        with connection.cursor() as cursor:
            for _ in range(15):  # 3 * 2**15 rows
                cursor.execute(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {table}")  # noqa: S608
        analyze()

        queryset = admin.site._registry[RecurringJob].get_queryset(request)
        plan = queryset.explain()
        if connection.vendor == "mysql":  # a row per table read, the key each one reads
            reads = mysql_plan(*queryset.query.sql_with_params())

    if connection.vendor == "mysql":
        subqueries = [read for read in reads if "SUBQUERY" in str(read["select_type"])]
        assert [read["key"] for read in subqueries] == ["django_jobs_schedule_idx"] * 2, plan
        assert all(int(read["rows"]) <= 10 for read in subqueries), plan
    else:
        assert plan.count("django_jobs_schedule_idx") == 2, plan  # both subqueries

"""The database-wide metrics: a real HTTP scrape parsed by prometheus_client's parser, who
may read them, and what a scrape reads of the database."""

from __future__ import annotations

import urllib.error
import urllib.request
from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from django_jobs import chain, metrics, pause_queue
from django_jobs.conf import setting_problem
from django_jobs.models import JobStatus, Leader

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "a-scraper-token-of-enough-length"
QUEUES = {"default": {"workers": 2}, "limited": {"workers": 1, "global_limit": 3}}


@pytest.fixture
def configured(settings):
    settings.DJANGO_JOBS = {**settings.DJANGO_JOBS, "QUEUES": QUEUES, "METRICS_TOKEN": TOKEN}


def scrape(base: str, token: str | None = TOKEN) -> tuple[int, str, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(base + "/metrics/", headers=headers)  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=20) as response:  # noqa: S310
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_a_scrape_with_the_token_reads_the_queues_gauges(configured, live_server, make_job):
    now = timezone.now()
    make_job(run_at=now - timedelta(minutes=5))  # due, waited five minutes
    make_job(run_at=now)
    make_job(run_at=now + timedelta(hours=1))  # scheduled
    make_job(run_at=now + timedelta(hours=1), attempts_used=1)  # retrying
    make_job(queue="limited", status=JobStatus.RUNNING, lease_expires_at=now + timedelta(minutes=5))
    chain({"job": "tests.ok"}, {"job": "tests.ok"})  # one more due, one waiting
    make_job(status=JobStatus.SUCCEEDED, finished_at=now)  # not a depth
    pause_queue("limited")
    Leader.objects.create(
        name="default", owner="w1", epoch=7, expires_at=now + timedelta(minutes=1)
    )

    status, content_type, text = scrape(live_server.url)
    assert status == 200 and content_type.startswith("text/plain; version=")
    found = samples(text)
    depth = "django_jobs_queue_depth"
    assert found[(depth, (("queue", "default"), ("status", "due")))] == 3
    assert found[(depth, (("queue", "default"), ("status", "scheduled")))] == 1
    assert found[(depth, (("queue", "default"), ("status", "retrying")))] == 1
    assert found[(depth, (("queue", "default"), ("status", "waiting")))] == 1
    assert found[(depth, (("queue", "limited"), ("status", "running")))] == 1
    age = found[("django_jobs_oldest_due_age_seconds", (("queue", "default"),))]
    assert 299 <= age < 400
    assert found[("django_jobs_running", (("queue", "limited"),))] == 1
    assert found[("django_jobs_limit", (("queue", "limited"),))] == 3
    assert ("django_jobs_limit", (("queue", "default"),)) not in found
    assert found[("django_jobs_queue_paused", (("queue", "limited"),))] == 1
    assert found[("django_jobs_queue_paused", (("queue", "default"),))] == 0
    assert found[("django_jobs_leader_epoch", ())] == 7
    assert found[("django_jobs_workers", ())] == 0


@pytest.mark.parametrize("token", [None, "wrong-token-of-enough-length", TOKEN[:-1]])
def test_a_scrape_without_the_token_is_refused(configured, live_server, token):
    status, _, text = scrape(live_server.url, token)
    assert status == 401 and "django_jobs" not in text


def test_no_token_configured_refuses_every_bearer(settings, live_server):
    settings.DJANGO_JOBS = {**settings.DJANGO_JOBS, "METRICS_TOKEN": None}
    assert scrape(live_server.url, "None")[0] == 401


def test_a_staff_user_reads_them_and_others_do_not(admin_client, client, django_user_model):
    assert admin_client.get("/metrics/").status_code == 200
    assert "django_jobs_workers" in admin_client.get("/metrics/").content.decode()
    user = django_user_model.objects.create_user("plain", password="pw")  # noqa: S106
    client.force_login(user)
    assert client.get("/metrics/").status_code == 401


def test_a_scrape_reads_no_finished_row(configured, make_job):
    """Its counts read the live jobs' partial indexes: finished rows cost it nothing."""
    make_job()
    with CaptureQueriesContext(connection) as before:
        metrics.exposition()
    for _ in range(20):
        make_job(status=JobStatus.SUCCEEDED, finished_at=timezone.now())
    with CaptureQueriesContext(connection) as after:
        metrics.exposition()
    assert len(after) == len(before)
    finished = ("'succeeded'", "'dead_lettered'", "'cancelled'")
    assert not [q["sql"] for q in after if any(status in q["sql"] for status in finished)]


def test_without_prometheus_client_the_view_says_how_to_install_it(configured, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(ImproperlyConfigured, match=r"django-jobs\[prometheus\]"):
        metrics.exposition()


@pytest.mark.parametrize("token", ["short", 12345, "sixteen chars\nno"])
def test_a_bad_metrics_token_is_a_setting_problem(token):
    problem = setting_problem("METRICS_TOKEN", token)
    assert problem is not None and "at least 16 printable characters" in problem.message
    assert setting_problem("METRICS_TOKEN", None) is None
    assert setting_problem("METRICS_TOKEN", TOKEN) is None


def test_a_bad_metrics_token_fails_the_settings_check(settings):
    from django_jobs.checks import check_settings

    settings.DJANGO_JOBS = {**settings.DJANGO_JOBS, "METRICS_TOKEN": "short"}
    [error] = check_settings()
    assert error.id == "django_jobs.E014" and "token_urlsafe" in error.hint

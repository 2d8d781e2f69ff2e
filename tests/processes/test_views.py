"""The example project's view enqueues in the caller's transaction."""

import pytest

from django_jobs.models import Job, JobStatus
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def test_signup_view_enqueues_once_per_address(client):
    first = client.post("/signup/", {"email": "ada@example.com"})
    again = client.post("/signup/", {"email": "ada@example.com"})
    assert first.status_code == again.status_code == 202
    assert first.json() == again.json()
    assert Job.objects.filter(name="emails.welcome").count() == 1
    assert client.post("/signup/", {"email": "nope"}).status_code == 400


def test_signup_view_never_sees_database_locked_while_workers_write(client, runjobs_process):
    """Workers claim and settle all the time; the view reads then writes in atomic()."""
    from django_jobs import schedule_jobs

    schedule_jobs([{"job": "demo.noop"}] * 300)
    workers = [runjobs_process.start("--queue", "default", "--queue", "emails") for _ in range(2)]
    wait_until(lambda: Job.objects.filter(status=JobStatus.SUCCEEDED).exists(), timeout=30)
    for n in range(60):
        response = client.post("/signup/", {"email": f"user{n}@example.com"})
        assert response.status_code == 202, response.content
    wait_until(
        lambda: not Job.objects.filter(status__in=["pending", "running"]).exists(), timeout=60
    )
    assert Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 360
    for process in workers:
        assert process.poll() is None, runjobs_process.log(process)

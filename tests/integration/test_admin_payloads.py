"""The admin shows a job's payload with the values of its secret keys masked."""

import html

import pytest
from django.urls import reverse

from django_jobs.models import JobStatus

pytestmark = pytest.mark.django_db

PAYLOAD = {
    "file": "orders.csv",
    "batch": 2,
    "auth": {"api_key": "sk_live_abc123", "user": "ada"},
    "rows": [{"card_token": "4111111111111111", "amount": 12}],
}


@pytest.mark.parametrize("model", ["job", "deadletter"])
def test_job_change_page_masks_the_payload_secrets(admin_client, make_job, model):
    job = make_job(payload=PAYLOAD, status=JobStatus.DEAD_LETTERED, attempts_used=3)
    response = admin_client.get(reverse(f"admin:django_jobs_{model}_change", args=[job.pk]))
    assert response.status_code == 200
    page = html.unescape(response.content.decode())
    for shown in ('"file": "orders.csv"', '"batch": 2', '"auth": "***"', '"card_token": "***"'):
        assert shown in page  # in the order the database keeps the keys
    for secret in ("sk_live_abc123", "ada", "4111111111111111"):
        assert secret not in page

"""Payloads that one database would store and another refuse are refused by both, up front."""

import pytest

from django_jobs import JobSpec, PayloadError, schedule_job, schedule_jobs
from django_jobs.models import Job

pytestmark = pytest.mark.django_db


def nested(depth: int) -> list:
    payload: list = []
    for _ in range(depth - 1):
        payload = [payload]
    return payload


REFUSED = [
    pytest.param({"note": "lone \udc80 surrogate"}, "payload['note'] contains a lone", id="value"),
    pytest.param({"a": [{"k\ud800": 1}]}, "payload['a'][0] has a key 'k\\ud800'", id="key"),
    pytest.param(nested(10_000), "nested more than 100 levels deep", id="deep"),
]


@pytest.mark.parametrize(("payload", "message"), REFUSED)
def test_schedule_job_refuses_an_unstorable_payload_inserting_nothing(payload, message):
    schedule_job("tests.ok", {"fine": 1})
    before = Job.objects.count()
    with pytest.raises(PayloadError) as excinfo:
        schedule_job("tests.ok", payload)
    assert message in str(excinfo.value)
    assert Job.objects.count() == before


@pytest.mark.parametrize(("payload", "message"), REFUSED)
def test_schedule_jobs_refuses_an_unstorable_payload_inserting_nothing(payload, message):
    before = Job.objects.count()
    specs = [JobSpec("tests.ok", {"fine": 1}), JobSpec("tests.ok", payload)]
    with pytest.raises(PayloadError) as excinfo:
        schedule_jobs(specs)
    assert message in str(excinfo.value)
    assert Job.objects.count() == before

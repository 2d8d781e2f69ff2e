from datetime import timedelta

import pytest

from django_jobs import DuplicateJobName, JobsError, UnknownJob, job
from django_jobs.registry import HOW_TO_REGISTER, get_definition, unregister


@pytest.fixture
def cleanup():
    names: list[str] = []
    yield names
    for name in names:
        unregister(name)


def test_job_registers_under_its_name_with_options(cleanup):
    cleanup.append("unit.options")

    @job("unit.options", queue="q", priority=3, max_attempts=9, timeout=timedelta(minutes=1))
    def handler(ctx, payload):
        return None

    definition = get_definition("unit.options")
    assert definition.func is handler
    assert (definition.queue, definition.priority, definition.max_attempts) == ("q", 3, 9)
    assert definition.timeout == 60
    assert get_definition(handler) is definition


def test_job_same_name_for_another_function_is_an_error(cleanup):
    cleanup.append("unit.twice")

    @job("unit.twice")
    def first(ctx, payload):
        return None

    with pytest.raises(DuplicateJobName, match="unit.twice"):

        @job("unit.twice")
        def second(ctx, payload):
            return None

    assert issubclass(DuplicateJobName, JobsError)


def test_job_same_function_registered_again_is_fine(cleanup):
    cleanup.append("unit.again")

    def handler(ctx, payload):
        return None

    job("unit.again")(handler)
    job("unit.again")(handler)
    assert get_definition("unit.again").func is handler


def test_get_definition_unknown_name_and_undecorated_function():
    with pytest.raises(UnknownJob, match="no job is registered under the name 'nope'"):
        get_definition("nope")

    def plain(ctx, payload):
        return None

    with pytest.raises(UnknownJob, match="decorate it with @job"):
        get_definition(plain)


@pytest.mark.parametrize(
    "kwargs", [{"max_attempts": 0}, {"timeout": 0}, {"queue": ""}, {"priority": "high"}]
)
def test_job_bad_options_are_value_errors(kwargs):
    with pytest.raises(ValueError):
        job("unit.bad", **kwargs)


def test_get_definition_unknown_name_suggests_the_closest_registered_names(cleanup):
    cleanup.extend(["unit.zebra.stripes", "unit.zebra.striped"])

    @job("unit.zebra.stripes")
    def welcome(ctx, payload):
        return None

    @job("unit.zebra.striped")
    def welcomed(ctx, payload):
        return None

    with pytest.raises(UnknownJob) as excinfo:
        get_definition("unit.zebra.stripe")
    assert str(excinfo.value) == (
        "no job is registered under the name 'unit.zebra.stripe'; "
        f"did you mean 'unit.zebra.stripes' or 'unit.zebra.striped'? {HOW_TO_REGISTER}"
    )


def test_get_definition_unknown_name_with_nothing_close_suggests_nothing():
    with pytest.raises(UnknownJob) as excinfo:
        get_definition("zzzzzzzz")
    assert str(excinfo.value) == (
        f"no job is registered under the name 'zzzzzzzz'. {HOW_TO_REGISTER}"
    )


def test_get_definition_unknown_name_says_how_a_job_and_a_task_get_registered():
    with pytest.raises(UnknownJob) as excinfo:
        get_definition("zzzzzzzz")
    said = str(excinfo.value)
    assert "@job(name) in an installed app's jobs.py (which runjobs imports" in said
    assert "an installed app's tasks.py or listing its module in" in said
    assert "TASKS[alias]['OPTIONS']['MODULES']" in said


def test_job_refuses_a_handler_that_cannot_take_ctx_and_payload(cleanup):
    cleanup.append("unit.one_argument")
    with pytest.raises(TypeError) as refused:

        @job("unit.one_argument")
        def send(payload):
            return None

    assert str(refused.value).startswith(
        "job 'unit.one_argument': its handler "
        "test_job_refuses_a_handler_that_cannot_take_ctx_and_payload.<locals>.send(payload) "
        "cannot be called as handler(ctx, payload), the two arguments every handler is given:"
        " write it as def send(ctx, payload)"
    )
    with pytest.raises(UnknownJob):
        get_definition("unit.one_argument")  # nothing was registered


@pytest.mark.parametrize(
    "handler",
    [
        lambda ctx: None,
        lambda ctx, payload, extra: None,
        lambda *, ctx, payload: None,
    ],
    ids=["one", "three", "keyword-only"],
)
def test_job_refuses_every_signature_that_cannot_take_two_arguments(cleanup, handler):
    cleanup.append("unit.bad_signature")
    with pytest.raises(TypeError, match="cannot be called as handler\\(ctx, payload\\)") as refused:
        job("unit.bad_signature")(handler)
    assert str(refused.value).endswith("write it as lambda ctx, payload: ...")


@pytest.mark.parametrize(
    "handler",
    [
        lambda ctx, payload: None,
        lambda ctx, payload=None: None,
        lambda *args: None,
        lambda ctx, *args, **kwargs: None,
    ],
    ids=["plain", "default", "star-args", "star-both"],
)
def test_job_takes_every_handler_that_can_be_called_with_ctx_and_payload(cleanup, handler):
    cleanup.append("unit.good_signature")
    job("unit.good_signature")(handler)
    assert get_definition("unit.good_signature").func is handler


def test_a_queues_timeout_is_read_once_and_again_when_the_settings_change(settings):
    from django_jobs.registry import queue_timeout, runnable

    settings.DJANGO_JOBS = {"QUEUES": {"slow": {"timeout": 5}}}
    assert runnable("no.such.job", "slow").timeout == 5.0
    settings.DJANGO_JOBS = {"QUEUES": {"slow": {"timeout": 7.5}}}
    assert queue_timeout("slow") == 7.5
    settings.DJANGO_JOBS = {"QUEUES": {"slow": {}}}
    assert queue_timeout("slow") is None


def test_a_bad_queue_timeout_raises_each_time_it_is_asked(settings):
    from django.core.exceptions import ImproperlyConfigured

    from django_jobs.registry import queue_timeout

    settings.DJANGO_JOBS = {"QUEUES": {"slow": {"timeout": "30s"}}}
    for _ in range(2):
        with pytest.raises((ImproperlyConfigured, ValueError)):
            queue_timeout("slow")

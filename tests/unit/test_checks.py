"""System checks and the settings reader: every bad value is refused, naming its key."""

import math
from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from django_jobs import add_recurring_job, job, schedule_job, schedule_jobs
from django_jobs.checks import check_queues_served, check_settings, check_use_tz
from django_jobs.conf import settings
from django_jobs.registry import unregister
from django_jobs.scheduling import JobSpec, build_job

NUMBER_KEYS = [
    "LEASE_SECONDS",
    "POLL_SECONDS",
    "MAINTENANCE_SECONDS",
    "LEADER_LEASE_SECONDS",
    "RETRY_MAX_SECONDS",
    "MAX_PAYLOAD_BYTES",
    "RETRY_BASE_SECONDS",
    "RETRY_JITTER",
    "SHUTDOWN_GRACE_SECONDS",
    "HEARTBEAT_SECONDS",
    "MAX_ATTEMPTS",
    "MAX_SNOOZES",
]
NOT_NUMBERS = [math.nan, math.inf, -math.inf, True, "1", [1]]


# -- USE_TZ ------------------------------------------------------------------


@override_settings(USE_TZ=False)
def test_check_use_tz_false_is_an_error_that_says_why():
    [error] = check_use_tz()
    assert error.id == "django_jobs.E010"
    assert "needs USE_TZ = True" in error.msg and "UTC" in error.msg
    assert "USE_TZ = True" in error.hint


def test_check_use_tz_true_passes():
    assert check_use_tz() == []


@override_settings(USE_TZ=False)
def test_runjobs_refuses_use_tz_false_without_system_checks():
    with pytest.raises(CommandError, match="needs USE_TZ = True"):
        call_command("runjobs", "--burst")


@override_settings(USE_TZ=False)
def test_scheduling_refuses_use_tz_false_before_writing():
    # No database access is allowed here: the refusal comes before any query.
    with pytest.raises(ImproperlyConfigured, match="needs USE_TZ = True"):
        schedule_job("tests.ok")
    with pytest.raises(ImproperlyConfigured, match="needs USE_TZ = True"):
        schedule_jobs([{"job": "tests.ok"}])
    with pytest.raises(ImproperlyConfigured, match="needs USE_TZ = True"):
        add_recurring_job("nightly", "0 2 * * *", "tests.ok")


# -- number settings -----------------------------------------------------------


@pytest.mark.parametrize("key", NUMBER_KEYS)
@pytest.mark.parametrize("value", NOT_NUMBERS, ids=repr)
def test_check_number_setting_refuses_nan_infinity_bool_and_text(key, value):
    with override_settings(DJANGO_JOBS={key: value}):
        errors = check_settings()
        assert [e.id for e in errors] == ["django_jobs.E003"]
        assert f"DJANGO_JOBS[{key!r}]" in errors[0].msg
        assert repr(value) in errors[0].msg
        with pytest.raises(ImproperlyConfigured) as raised:
            getattr(settings, key)
        assert str(raised.value) == errors[0].msg


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("LEASE_SECONDS", 0),
        ("LEASE_SECONDS", -5),
        ("RETRY_JITTER", -0.1),
        ("HEARTBEAT_SECONDS", 0),
        ("MAX_ATTEMPTS", 0),
        ("MAX_ATTEMPTS", 2.0),
        ("MAX_ATTEMPTS", 2**31),
        ("MAX_SNOOZES", 0),
    ],
)
def test_check_number_setting_refuses_values_out_of_range(key, value):
    with override_settings(DJANGO_JOBS={key: value}):
        [error] = check_settings()
        assert error.id == "django_jobs.E003" and f"DJANGO_JOBS[{key!r}]" in error.msg


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("RETRY_BASE_SECONDS", 1e12),
        ("RETRY_MAX_SECONDS", 1e12),
        ("LEASE_SECONDS", 2.5e11),
        ("HEARTBEAT_SECONDS", 1e12),
        ("RETRY_JITTER", 11),
    ],
)
def test_check_number_setting_refuses_what_no_date_can_hold(key, value):
    """A delay past a century would make a date past what a datetime holds, and fail the
    outcome of every job it touches."""
    with override_settings(DJANGO_JOBS={key: value, "RETRY_MAX_SECONDS": 1e12}):
        errors = [e for e in check_settings() if f"DJANGO_JOBS[{key!r}] must be at most" in e.msg]
        assert [e.id for e in errors] == ["django_jobs.E003"]
        with pytest.raises(ImproperlyConfigured, match="must be at most"):
            getattr(settings, key)


def test_check_number_setting_accepts_a_century_of_seconds():
    with override_settings(DJANGO_JOBS={"RETRY_MAX_SECONDS": 100 * 365 * 86400}):
        assert check_settings() == []


# -- boolean settings ------------------------------------------------------------


@pytest.mark.parametrize("value", [1, 0, "false", None], ids=repr)
def test_check_listen_setting_refuses_anything_but_a_bool(value):
    with override_settings(DJANGO_JOBS={"LISTEN": value}):
        [error] = check_settings()
        assert error.id == "django_jobs.E007"
        assert error.msg == f"DJANGO_JOBS['LISTEN'] must be True or False, got {value!r}."
        with pytest.raises(ImproperlyConfigured) as raised:
            settings.LISTEN  # noqa: B018
        assert str(raised.value) == error.msg


def test_check_listen_setting_defaults_to_true_and_accepts_false():
    assert settings.LISTEN is True
    with override_settings(DJANGO_JOBS={"LISTEN": False}):
        assert check_settings() == []
        assert settings.LISTEN is False


# -- LISTEN_DATABASE ---------------------------------------------------------------


@pytest.mark.parametrize("value", [5, "", ["default"]], ids=repr)
def test_check_listen_database_refuses_what_cannot_name_a_database(value):
    with override_settings(DJANGO_JOBS={"LISTEN_DATABASE": value}):
        [error] = check_settings()
        assert error.id == "django_jobs.E012"
        assert error.msg == (
            "DJANGO_JOBS['LISTEN_DATABASE'] must be the name of a database in DATABASES, "
            f"or None, got {value!r}."
        )
        with pytest.raises(ImproperlyConfigured):
            settings.LISTEN_DATABASE  # noqa: B018


def test_check_listen_database_names_a_database_of_databases_or_suggests_one():
    with override_settings(DJANGO_JOBS={"LISTEN_DATABASE": "defualt"}):
        [error] = check_settings()
    assert (error.id, error.msg, error.hint) == (
        "django_jobs.E012",
        "DJANGO_JOBS['LISTEN_DATABASE'] ('defualt') is not a database in DATABASES.",
        "Did you mean 'default'?",
    )
    with override_settings(DJANGO_JOBS={"LISTEN_DATABASE": "direct"}):
        [error] = check_settings()
    assert error.hint == "Known: default."


def test_check_listen_database_must_be_postgresql():
    from django.db import connection

    with override_settings(DJANGO_JOBS={"LISTEN_DATABASE": "default"}):
        errors = check_settings()
    if connection.vendor == "postgresql":
        assert errors == []
    else:
        [error] = errors
        assert error.id == "django_jobs.E012"
        assert error.msg == (
            f"DJANGO_JOBS['LISTEN_DATABASE'] ('default') is a {connection.vendor} database: "
            "LISTEN is PostgreSQL's."
        )


def test_check_listen_database_on_postgresql_beside_jobs_elsewhere_is_a_warning(monkeypatch):
    """Jobs enqueued into SQLite or MariaDB send no NOTIFY: a PostgreSQL LISTEN_DATABASE
    would wait for nothing, and said nothing of it."""
    from django.conf import settings as django_settings
    from django.db import connection
    from django.db.utils import ConnectionHandler

    from django_jobs import checks

    listen = {"ENGINE": "django.db.backends.postgresql", "NAME": "jobs", "HOST": "127.0.0.1"}
    monkeypatch.setitem(django_settings.DATABASES, "listen", listen)
    monkeypatch.setattr(checks, "connections", ConnectionHandler(django_settings.DATABASES))
    with override_settings(DJANGO_JOBS={"LISTEN_DATABASE": "listen"}):
        messages = check_settings()
    if connection.vendor == "postgresql":
        assert messages == []
    else:
        [warning] = messages
        assert warning.id == "django_jobs.W012"
        assert warning.msg == (
            "DJANGO_JOBS['LISTEN_DATABASE'] ('listen') is a PostgreSQL database, but the jobs "
            f"are in 'default', a {connection.vendor} database, whose enqueues wake no one: "
            "nothing would ever be heard there."
        )


def test_check_listen_database_defaults_to_none():
    assert settings.LISTEN_DATABASE is None
    with override_settings(DJANGO_JOBS={"LISTEN_DATABASE": None}):
        assert check_settings() == []


@override_settings(
    DJANGO_JOBS={
        "LEASE_SECONDS": 2.5,
        "RETRY_BASE_SECONDS": 0,
        "HEARTBEAT_SECONDS": None,
        "MAX_ATTEMPTS": 2**31 - 1,
    }
)
def test_check_number_settings_in_range_pass():
    assert check_settings() == []
    assert settings.LEASE_SECONDS == 2.5
    assert settings.heartbeat_seconds() == pytest.approx(2.5 / 3)


# -- QUEUES --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("queues", "named", "hint"),
    [
        ({"q": {"timeout": "30s"}}, "['q']['timeout']", "Give seconds as a number: 30, not '30s'."),
        ({"q": {"timeout": 0}}, "['q']['timeout']", "Give seconds above 0, e.g. 30, or None"),
        ({"q": {"timeout": -1}}, "['q']['timeout']", "Give seconds above 0"),
        ({"q": {"timeout": math.nan}}, "['q']['timeout']", "Give seconds above 0"),
        ({"q": {"timeout": math.inf}}, "['q']['timeout']", "Give seconds above 0"),
        ({"q": {"timeout": True}}, "['q']['timeout']", "Give seconds above 0"),
        ({"q": {"workers": 0}}, "no handler threads never runs its jobs", "Give it 1 or more"),
        ({"q": {"workers": -2}}, "['q']['workers'] must be a positive integer", "1 or more"),
        ({"q": {"workers": True}}, "['q']['workers']", "e.g. {'workers': 2}"),
        ({"q": {"workers": "2"}}, "['q']['workers']", "e.g. {'workers': 2}"),
        ({"q": {"workers": 1.5}}, "['q']['workers']", "Give a whole number of handler threads"),
        ({"q": {"worker": 2}}, "unknown option 'worker'", "Did you mean 'workers'?"),
        ({"q": {"timeuot": 2}}, "unknown option 'timeuot'", "Did you mean 'timeout'?"),
        (
            {"q": {"retries": 2}},
            "unknown option 'retries'",
            "Known: workers, async_concurrency, timeout, global_limit, rate_limit.",
        ),
        ({"q": {"async_concurrency": 0}}, "['async_concurrency'] must be a positive", "loop"),
        ({"q": {"async_concurrency": "500"}}, "['async_concurrency'] must be a positive", "500"),
        ({"q": {"async_concurren": 5}}, "unknown option", "Did you mean 'async_concurrency'?"),
        ({"q": {"global_limit": 0}}, "['global_limit'] must be a whole number", "across every"),
        ({"q": {"global_limit": "2"}}, "['global_limit'] must be a whole number", "None"),
        ({"q": {"rate_limit": "100/day"}}, "['rate_limit'] is not a rate", "'100/m'"),
        ({"q": {"rate_limit": "100/min"}}, "got '100/min'; did you mean '100/m'?", "'100/m'"),
        ({"q": {"rate_limit": "0/m"}}, "a rate's count is a whole number", "each minute"),
        ({"q": {"rate_limit": 100}}, "a rate is 'COUNT/WINDOW'", "'100/m'"),
        ({"q": None}, "['q'] must be a dict of options, got None", "{} takes the defaults"),
        ({"q": 4}, "['q'] must be a dict of options, got 4", "{'workers': 2, 'timeout': 30}"),
        ({"": {}}, "100 characters without NUL characters or lone surrogates: ''", "@job(queue="),
        ({"  ": {}}, "100 characters without NUL characters or lone surrogates: '  '", "@job("),
        ({"x" * 101: {}}, "100 characters without NUL characters or lone surrogates: 'xx", "@job("),
        ({5: {}}, "100 characters without NUL characters or lone surrogates: 5", "@job("),
        ({}, "must be a non-empty dict", "For example {'default': {'workers': 2}"),
        (["default"], "must be a non-empty dict", "For example {'default'"),
    ],
)
def test_check_queues_refuses_bad_names_and_options(queues, named, hint):
    with override_settings(DJANGO_JOBS={"QUEUES": queues}):
        [error] = check_settings()
        assert error.id == "django_jobs.E004"
        assert "DJANGO_JOBS['QUEUES']" in error.msg and named in error.msg
        assert hint in error.hint
        with pytest.raises(ImproperlyConfigured) as raised:
            _ = settings.QUEUES
        assert str(raised.value) == error.msg


@override_settings(
    DJANGO_JOBS={"QUEUES": {"q": {"workers": 3, "timeout": 30}, "r": {"timeout": 2.5}, "s": {}}}
)
def test_check_queues_good_options_pass_and_the_worker_reads_them_the_same():
    assert check_settings() == []
    assert (settings.queue_workers("q"), settings.queue_workers("s")) == (3, 1)
    assert settings.queue_timeout("q") == 30.0
    assert settings.queue_timeout("r") == 2.5
    assert settings.queue_timeout("s") is None
    assert settings.queue_timeout("not-listed") is None


# -- priority and queue arguments -----------------------------------------------------


BAD_PRIORITIES = [True, 2**31, -(2**31) - 1, "1", 1.0, math.nan]
BAD_QUEUES = ["", "   ", "x" * 101, 5]
PRIORITY_ERROR = r"^priority must be (an integer|from -2147483648 to 2147483647), got "
QUEUE_ERROR = (
    r"^queue must be a non-empty string of at most 100 characters without NUL characters or "
    r"lone surrogates, got "
)


@pytest.mark.parametrize("priority", BAD_PRIORITIES, ids=repr)
def test_scheduling_refuses_a_bad_priority_naming_it(priority):
    # No database access is allowed here: nothing is written.
    with pytest.raises(ValueError, match=PRIORITY_ERROR):
        schedule_job("tests.ok", priority=priority)
    with pytest.raises(ValueError, match=PRIORITY_ERROR):
        schedule_jobs([{"job": "tests.ok"}, {"job": "tests.ok", "priority": priority}])


@pytest.mark.parametrize("queue", BAD_QUEUES, ids=repr)
def test_scheduling_refuses_a_bad_queue_naming_it(queue):
    with pytest.raises(ValueError, match=QUEUE_ERROR):
        schedule_job("tests.ok", queue=queue)
    with pytest.raises(ValueError, match=QUEUE_ERROR):
        schedule_jobs([JobSpec("tests.ok"), JobSpec("tests.ok", queue=queue)])


def test_scheduling_accepts_the_edges_of_priority_and_queue():
    assert build_job(JobSpec("tests.ok", priority=2**31 - 1)).priority == 2**31 - 1
    assert build_job(JobSpec("tests.ok", priority=-(2**31))).priority == -(2**31)
    assert build_job(JobSpec("tests.ok", queue="x" * 100)).queue == "x" * 100
    assert build_job(JobSpec("tests.emails")).queue == "emails"


@pytest.mark.parametrize("priority", BAD_PRIORITIES, ids=repr)
def test_job_decorator_refuses_a_bad_priority(priority):
    with pytest.raises(ValueError, match=PRIORITY_ERROR):
        job("tests.bad-priority", priority=priority)


@pytest.mark.parametrize("queue", BAD_QUEUES, ids=repr)
def test_job_decorator_refuses_a_bad_queue(queue):
    with pytest.raises(ValueError, match=QUEUE_ERROR):
        job("tests.bad-queue", queue=queue)


# -- queues no worker serves ---------------------------------------------------------


@pytest.fixture
def job_on_unlisted_queue():
    @job("tests.unlisted-a", queue="unlisted")
    def first(ctx, payload):
        return None

    @job("tests.unlisted-b", queue="unlisted")
    def second(ctx, payload):
        return None

    yield
    unregister("tests.unlisted-a")
    unregister("tests.unlisted-b")


def test_check_queues_served_warns_of_jobs_on_a_queue_not_in_queues(job_on_unlisted_queue):
    warnings = {w.msg: w for w in check_queues_served()}
    [warning] = [w for msg, w in warnings.items() if "'unlisted'" in msg]
    assert warning.id == "django_jobs.W010"
    assert "'tests.unlisted-a', 'tests.unlisted-b'" in warning.msg
    assert "DJANGO_JOBS['QUEUES'] does not list" in warning.msg
    assert "runjobs --queue unlisted" in warning.hint


def test_check_queues_served_is_quiet_for_listed_queues(job_on_unlisted_queue):
    with override_settings(
        DJANGO_JOBS={"QUEUES": {"default": {}, "emails": {}, "unlisted": {"workers": 1}}}
    ):
        assert [
            w for w in check_queues_served() if "tests." in w.msg and "'unlisted'" in w.msg
        ] == []
    # The test project lists "emails", so its job there draws no warning.
    assert not any("'emails'" in w.msg for w in check_queues_served())


@override_settings(DJANGO_JOBS={})
def test_check_queues_served_warns_of_emails_under_the_default_queues():
    # The README's tour: @job(queue="emails") with the default QUEUES ({"default": ...}).
    [warning] = [w for w in check_queues_served() if "'emails'" in w.msg]
    assert "'tests.emails'" in warning.msg


@override_settings(DJANGO_JOBS={"QUEUES": ["default"]})
def test_check_queues_served_leaves_a_malformed_queues_to_its_error():
    assert check_queues_served() == []


@override_settings(DJANGO_JOBS={"LEASE_SECONDS": math.inf})
def test_runjobs_without_system_checks_refuses_a_bad_setting_in_the_checks_words():
    [error] = check_settings()
    with pytest.raises(CommandError) as raised:
        call_command("runjobs", "--burst")
    assert str(raised.value) == error.msg


# -- RETENTION -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("retention", "named", "hint"),
    [
        ({"succeeded": 7}, "['succeeded'] must be a positive timedelta or None, got 7", "not 7"),
        ({"succeeded": "7 days"}, "['succeeded'] must be a positive timedelta", "timedelta"),
        ({"cancelled": timedelta(0)}, "['cancelled'] must be a positive timedelta", "timedelta"),
        ({"dead_lettered": -timedelta(days=1)}, "['dead_lettered'] must be a positive", "None"),
        ({"succeded": timedelta(days=1)}, "unknown status 'succeded'", "Did you mean 'succeeded'?"),
        ({"dead-lettered": None}, "status 'dead-lettered'", "Did you mean 'dead_lettered'?"),
        ({"pending": None}, "unknown status 'pending'", "never pruned"),
        (timedelta(days=7), "must be a dict of finished status", "statuses: succeeded"),
        (None, "must be a dict of finished status", "statuses: succeeded"),
    ],
)
def test_check_retention_refuses_what_is_not_a_status_to_a_duration_or_none(retention, named, hint):
    with override_settings(DJANGO_JOBS={"RETENTION": retention}):
        [error] = check_settings()
        assert error.id == "django_jobs.E008"
        assert "DJANGO_JOBS['RETENTION']" in error.msg and named in error.msg
        assert hint in error.hint
        with pytest.raises(ImproperlyConfigured) as raised:
            _ = settings.RETENTION
        assert str(raised.value) == error.msg


def test_check_retention_reports_every_bad_entry():
    with override_settings(DJANGO_JOBS={"RETENTION": {"succeeded": 1, "cancled": None}}):
        assert [e.id for e in check_settings()] == ["django_jobs.E008"] * 2


def test_check_retention_defaults_and_a_partial_dict_replaces_only_what_it_names():
    assert settings.RETENTION == {
        "succeeded": timedelta(days=7),
        "cancelled": timedelta(days=7),
        "dead_lettered": timedelta(days=30),
    }
    with override_settings(DJANGO_JOBS={"RETENTION": {"dead_lettered": None}}):
        assert check_settings() == []
        assert settings.RETENTION == {
            "succeeded": timedelta(days=7),
            "cancelled": timedelta(days=7),
            "dead_lettered": None,
        }
    with override_settings(DJANGO_JOBS={"RETENTION": {}}):
        assert check_settings() == []
        assert settings.RETENTION["succeeded"] == timedelta(days=7)


# -- every message names the fix --------------------------------------------------------


POSITIVE_KEYS = [
    "LEASE_SECONDS",
    "POLL_SECONDS",
    "MAINTENANCE_SECONDS",
    "RETRY_MAX_SECONDS",
    "MAX_PAYLOAD_BYTES",
    "HEARTBEAT_SECONDS",
    "MAX_ATTEMPTS",
]
ZERO_OR_MORE_KEYS = ["RETRY_BASE_SECONDS", "RETRY_JITTER", "SHUTDOWN_GRACE_SECONDS"]


@pytest.mark.parametrize("key", POSITIVE_KEYS)
@pytest.mark.parametrize("value", [0, -1, -0.5], ids=repr)
def test_check_number_setting_refuses_zero_and_negatives_where_zero_makes_no_sense(key, value):
    with override_settings(DJANGO_JOBS={key: value}):
        [error] = check_settings()
    assert error.id == "django_jobs.E003"
    assert error.msg.startswith(f"DJANGO_JOBS[{key!r}] must be a")
    assert "positive" in error.msg or "from 1" in error.msg
    assert f"got {value!r}." in error.msg
    assert error.hint.startswith("Give ")


@pytest.mark.parametrize("key", ZERO_OR_MORE_KEYS)
def test_check_number_setting_accepts_zero_where_zero_means_none_and_refuses_negatives(key):
    with override_settings(DJANGO_JOBS={key: 0}):
        assert check_settings() == []
        assert getattr(settings, key) == 0
    with override_settings(DJANGO_JOBS={key: -1}):
        [error] = check_settings()
    assert error.msg == f"DJANGO_JOBS[{key!r}] must be a non-negative finite number, got -1."
    assert "0 or more" in error.hint


@pytest.mark.parametrize(
    ("key", "value", "hint"),
    [
        ("LEASE_SECONDS", "300", "Give seconds above 0, e.g. 300 (a number, not text)."),
        ("POLL_SECONDS", True, "Give seconds above 0, e.g. 1."),
        ("MAX_PAYLOAD_BYTES", math.inf, "Give a number of bytes above 0, e.g. 1048576."),
        ("MAX_ATTEMPTS", 2.5, "Give a whole number of attempts, at least 1, e.g. 5."),
        ("RETRY_JITTER", "0.2", "Give a fraction of the delay, 0 or more, e.g. 0.2 (a number"),
        ("SHUTDOWN_GRACE_SECONDS", None, "Give seconds, 0 or more, e.g. 20."),
        ("HEARTBEAT_SECONDS", "10", "Give seconds above 0 (a number, not text), or None for"),
    ],
)
def test_check_number_setting_hint_gives_the_unit_and_an_example(key, value, hint):
    with override_settings(DJANGO_JOBS={key: value}):
        [error] = check_settings()
    assert error.hint.startswith(hint)


@override_settings(DJANGO_JOBS={"LISTEN": "false"})
def test_check_boolean_setting_hint_says_to_write_a_bool():
    [error] = check_settings()
    assert error.hint == "Write DJANGO_JOBS['LISTEN']: True or False (a bool, not str)."


@override_settings(DJANGO_JOBS=[("LEASE_SECONDS", 10)])
def test_check_django_jobs_not_a_dict_names_the_value_and_the_fix():
    [error] = check_settings()
    assert error.id == "django_jobs.E001"
    assert error.msg == "DJANGO_JOBS must be a dict, got list [('LEASE_SECONDS', 10)]."
    assert "DJANGO_JOBS = {'QUEUES': {'default': {'workers': 2}}}" in error.hint


@override_settings(DJANGO_JOBS={"FROBNICATE": 1})
def test_check_unknown_key_without_a_close_one_lists_the_known_keys():
    [error] = check_settings()
    assert error.id == "django_jobs.E002"
    assert error.hint.startswith("Known keys: QUEUES, LEASE_SECONDS, ")


# -- the heartbeat and the lease ----------------------------------------------------------


@pytest.mark.parametrize(
    ("lease", "beat"), [(300, 300), (300, 301), (None, 300), (2.5, 2.5)], ids=str
)
def test_check_heartbeat_not_shorter_than_the_lease_is_an_error(lease, beat):
    jobs = {"HEARTBEAT_SECONDS": beat} | ({} if lease is None else {"LEASE_SECONDS": lease})
    shown = 300 if lease is None else lease
    with override_settings(DJANGO_JOBS=jobs):
        [error] = check_settings()
        assert error.id == "django_jobs.E009"
        assert error.msg == (
            f"DJANGO_JOBS['HEARTBEAT_SECONDS'] ({beat!r}) must be shorter than "
            f"DJANGO_JOBS['LEASE_SECONDS'] ({shown!r}): a lease would end before the beat "
            "that renews it."
        )
        assert f"set it to at most {shown / 3:g}" in error.hint
        # A worker started without the checks refuses it in the same words.
        with pytest.raises(ImproperlyConfigured) as raised:
            settings.validate()
        assert str(raised.value) == error.msg


@override_settings(DJANGO_JOBS={"LEASE_SECONDS": 300, "HEARTBEAT_SECONDS": 150})
def test_check_heartbeat_longer_than_a_third_of_the_lease_warns_with_the_fix():
    [warning] = check_settings()
    assert warning.id == "django_jobs.W002"
    assert warning.msg.startswith(
        "DJANGO_JOBS['HEARTBEAT_SECONDS'] (150) is longer than a third of "
        "DJANGO_JOBS['LEASE_SECONDS'] (300): the worker renews leases every 100 s instead"
    )
    assert warning.hint == (
        "Set HEARTBEAT_SECONDS to 100 or less (or None: a third of the lease), or raise "
        "LEASE_SECONDS to 450 or more."
    )
    settings.validate()  # a warning: the worker runs, at a third of the lease
    assert settings.heartbeat_seconds() == 100


@pytest.mark.parametrize(
    "jobs",
    [
        {"LEASE_SECONDS": 300, "HEARTBEAT_SECONDS": 100},
        {"LEASE_SECONDS": 3, "HEARTBEAT_SECONDS": 1},
        {"HEARTBEAT_SECONDS": 10},
        {"LEASE_SECONDS": 1},
        {"LEASE_SECONDS": "bad", "HEARTBEAT_SECONDS": 10},  # E003 only
    ],
    ids=str,
)
def test_check_heartbeat_of_a_third_of_the_lease_or_less_passes(jobs):
    assert [
        e.id for e in check_settings() if e.id in ("django_jobs.E009", "django_jobs.W002")
    ] == []


# -- RECURRING entries -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "check_id", "message", "hint"),
    [
        ({"cron": "@daily", "job": "tests.ok", "timzone": "UTC"}, "E005",
         "['nightly'] has an unknown key 'timzone'.", "Did you mean 'timezone'?"),
        ({"cron": "@daily", "job": "tests.ok", "payloads": {}}, "E005",
         "['nightly'] has an unknown key 'payloads'.", "Did you mean 'payload'?"),
        ({"cron": "@daily", "job": "tests.ok", "every": "day"}, "E005",
         "['nightly'] has an unknown key 'every'.", "Known keys: cron, enabled, job, "),
        ({"job": "tests.ok"}, "E005", "at least 'cron' and 'job'; it has no 'cron'.",
         "For example {'cron': '0 2 * * *', 'job': 'reports.nightly'}."),
        ({}, "E005", "it has no 'cron' and no 'job'.", "For example {'cron'"),
        ("@daily", "E005", "['nightly'] must be a dict of options, got '@daily'.",
         "For example {'cron'"),
        ({"cron": "@daily", "job": "tests.ok", "enabled": "no"}, "E006",
         "['nightly']['enabled'] must be True or False, got 'no'.", "'enabled': False"),
        ({"cron": "@daily", "job": "tests.ok", "overlap": 0}, "E006",
         "['nightly']['overlap'] must be True or False, got 0.", "'overlap': True"),
        ({"cron": "@daily", "job": "tests.nope"}, "E006",
         "['nightly']: no job is registered under the name 'tests.nope'", "Register the job"),
        ({"cron": "0 2 * *", "job": "tests.ok"}, "E006",
         "['nightly']: '0 2 * *' is not a valid cron", "A cron is five fields"),
        ({"cron": "@daily", "job": "tests.ok", "timezone": "Mars/Olympus"}, "E006",
         "unknown time zone 'Mars/Olympus'", "an IANA name such as 'Europe/Paris'"),
        ({"cron": "@daily", "job": "tests.ok", "payload": {"when": math.nan}}, "E006",
         "['nightly']: ", "that JSON can encode"),
    ],
)  # fmt: skip
def test_check_recurring_entry_says_what_is_wrong_and_the_fix(entry, check_id, message, hint):
    with override_settings(DJANGO_JOBS={"RECURRING": {"nightly": entry}}):
        [error] = check_settings()
    assert error.id == f"django_jobs.{check_id}"
    assert error.msg.startswith("DJANGO_JOBS['RECURRING']")
    assert message in error.msg
    assert hint in error.hint


@pytest.mark.parametrize("name", ["", "  ", "x" * 201, 7], ids=repr)
def test_check_recurring_schedule_name_must_be_a_short_non_empty_string(name):
    with override_settings(
        DJANGO_JOBS={"RECURRING": {name: {"cron": "@daily", "job": "tests.ok"}}}
    ):
        [error] = check_settings()
    assert error.id == "django_jobs.E005"
    assert error.msg.startswith(
        "A schedule name in DJANGO_JOBS['RECURRING'] must be a non-empty string of at most "
        "200 characters without NUL characters or lone surrogates: "
    )


@override_settings(DJANGO_JOBS={"RECURRING": [("nightly", {})]})
def test_check_recurring_not_a_dict_names_the_value():
    [error] = check_settings()
    assert error.id == "django_jobs.E005"
    assert error.msg.endswith("got list [('nightly', {})].")


def test_check_retention_longer_than_a_thousand_years_is_refused_for_none():
    with override_settings(DJANGO_JOBS={"RETENTION": {"succeeded": timedelta(days=999_999)}}):
        [error] = check_settings()
        assert error.id == "django_jobs.E008"
        assert error.msg == (
            "DJANGO_JOBS['RETENTION']['succeeded'] must be at most 365000 days, got "
            "datetime.timedelta(days=999999): its cut-off would fall before the calendar's "
            "first years."
        )
        assert error.hint == "None keeps the jobs forever."
        with pytest.raises(ImproperlyConfigured):
            _ = settings.RETENTION  # the cleaner never computes that cut-off
    with override_settings(DJANGO_JOBS={"RETENTION": {"succeeded": timedelta(days=365_000)}}):
        assert check_settings() == []


# -- retries ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("jobs", "every"),
    [
        ({"RETRY_BASE_SECONDS": 600, "RETRY_MAX_SECONDS": 60}, "60"),
        ({"RETRY_BASE_SECONDS": 7200}, "3600"),
        ({"RETRY_MAX_SECONDS": 10.5}, "10.5"),
    ],
    ids=str,
)
def test_check_retry_base_above_the_ceiling_warns_that_every_retry_waits_the_ceiling(jobs, every):
    with override_settings(DJANGO_JOBS=jobs):
        [warning] = check_settings()
    assert warning.id == "django_jobs.W005"
    assert f"every retry waits {every} s (plus jitter), with no backoff" in warning.msg
    assert "Lower the first, or raise the second." in warning.hint


@pytest.mark.parametrize(
    "jobs",
    [
        {"RETRY_BASE_SECONDS": 60, "RETRY_MAX_SECONDS": 60},
        {"RETRY_BASE_SECONDS": 0, "RETRY_MAX_SECONDS": 1},
        {"RETRY_BASE_SECONDS": "x", "RETRY_MAX_SECONDS": 1},  # E003 only
    ],
    ids=str,
)
def test_check_retry_base_at_or_below_the_ceiling_passes(jobs):
    assert [m.id for m in check_settings() if m.id == "django_jobs.W005"] == []


# -- recurring schedules on a queue no worker serves ---------------------------------------


@override_settings(
    DJANGO_JOBS={
        "RECURRING": {
            "nightly": {"cron": "@daily", "job": "tests.ok", "queue": "reports"},
            "hourly": {"cron": "@hourly", "job": "tests.ok", "queue": "default"},
            "plain": {"cron": "@hourly", "job": "tests.ok"},
        }
    }
)
def test_check_queues_served_warns_of_a_schedule_on_a_queue_not_in_queues():
    [warning] = [w for w in check_queues_served() if "RECURRING" in w.msg]
    assert warning.id == "django_jobs.W010"
    assert warning.msg == (
        "DJANGO_JOBS['RECURRING']['nightly'] enqueues on queue 'reports', which "
        "DJANGO_JOBS['QUEUES'] does not list: `runjobs` without --queue never runs its jobs."
    )
    assert "`manage.py runjobs --queue reports`" in warning.hint


def test_conf_defaults_and_overrides():
    assert settings.LEASE_SECONDS == 300
    with override_settings(DJANGO_JOBS={"LEASE_SECONDS": 2.5}):
        assert settings.LEASE_SECONDS == 2.5
        assert settings.MAX_ATTEMPTS == 5
    with pytest.raises(AttributeError):
        _ = settings.NOT_A_KEY


@override_settings(DJANGO_JOBS={"LEASE_SECOND": 10, "MAX_ATTEMPT": 3})
def test_check_unknown_key_suggests_the_closest():
    errors = check_settings()
    assert [e.id for e in errors] == ["django_jobs.E002", "django_jobs.E002"]
    assert "Unknown DJANGO_JOBS key 'LEASE_SECOND'" in errors[0].msg
    assert errors[0].hint == "Did you mean 'LEASE_SECONDS'?"
    assert errors[1].hint == "Did you mean 'MAX_ATTEMPTS'?"


@override_settings(
    DJANGO_JOBS={
        "LEASE_SECONDS": 0,
        "RETRY_JITTER": -1,
        "POLL_SECONDS": "1",
        "MAX_ATTEMPTS": 0,
        "QUEUES": {"a": {"workers": 0}},
    }
)
def test_check_bad_values_are_errors():
    messages = [e.msg for e in check_settings()]
    assert any("LEASE_SECONDS" in m for m in messages)
    assert any("RETRY_JITTER" in m for m in messages)
    assert any("POLL_SECONDS" in m for m in messages)
    assert any("MAX_ATTEMPTS" in m for m in messages)
    assert any("QUEUES" in m for m in messages)


def test_check_good_settings_pass():
    assert check_settings() == []


def test_settings_check_a_value_once_and_again_once_it_is_replaced(monkeypatch, settings):
    # The hot path reads QUEUES for each job: a value that passed is not checked again.
    from django_jobs import conf

    checked = []
    check = conf.setting_problem
    monkeypatch.setattr(conf, "setting_problem", lambda k, v: checked.append(k) or check(k, v))
    settings.DJANGO_JOBS = {"QUEUES": {"reports": {"workers": 1}}}
    for _ in range(3):
        assert conf.settings.queue_workers("reports") == 1
    assert checked == ["QUEUES"]
    settings.DJANGO_JOBS = {"QUEUES": {"reports": {"workers": 0}}}
    with pytest.raises(ImproperlyConfigured, match="reports"):
        conf.settings.queue_workers("reports")
    with pytest.raises(ImproperlyConfigured, match="reports"):  # a refused value: every time
        conf.settings.queue_workers("reports")


@pytest.mark.parametrize("name", ["DJANGO_JOB", "DJANGOJOBS", "DJANGO_JOBSS", "DJANGO__JOBS"])
def test_check_settings_names_a_setting_that_looks_like_django_jobs(settings, name):
    setattr(settings, name, {"QUEUES": {"default": {"workers": 2}}})
    [warning] = [m for m in check_settings() if m.id == "django_jobs.W013"]
    assert warning.msg.startswith(f"The setting {name!r} looks like DJANGO_JOBS")
    assert warning.hint == "Move what it sets into DJANGO_JOBS, and remove it."


def test_check_settings_says_rename_a_look_alike_when_django_jobs_is_not_set(settings):
    del settings.DJANGO_JOBS
    settings.DJANGO_JOB = {"MAX_ATTEMPTS": 3}
    [warning] = [m for m in check_settings() if m.id == "django_jobs.W013"]
    assert warning.hint == "Rename it DJANGO_JOBS."


@pytest.mark.parametrize("name", ["DJANGO_Q", "DJANGO_TASKS", "JOBS", "DJANGO_JOBS_DATABASE"])
def test_check_settings_leaves_other_settings_alone(settings, name):
    setattr(settings, name, {})
    assert [m for m in check_settings() if m.id == "django_jobs.W013"] == []


@pytest.mark.parametrize("value", ["warning", "raise", True, None])
def test_check_settings_refuses_an_unknown_queues_choice_it_does_not_know(settings, value):
    settings.DJANGO_JOBS = {"UNKNOWN_QUEUES": value}
    [error] = [m for m in check_settings() if m.id == "django_jobs.E013"]
    assert error.msg == f"DJANGO_JOBS['UNKNOWN_QUEUES'] must be 'warn' or 'error', got {value!r}."


def test_a_rate_limits_did_you_mean_ends_the_sentence():
    with override_settings(DJANGO_JOBS={"QUEUES": {"q": {"rate_limit": "100/min"}}}):
        [error] = check_settings()
    assert error.msg.endswith("; did you mean '100/m'?")

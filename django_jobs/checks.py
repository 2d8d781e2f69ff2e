"""System checks for the ``DJANGO_JOBS`` setting and the database it runs on.

Every message says what is wrong, the value given, and (in its hint) the fix.
The checks tagged ``database`` are about the jobs database and read it, so
Django runs them only when asked to (``manage.py check --database default``,
``migrate``), and ``runjobs`` logs them at start-up: said where the database is
set up and served, not on every command. A database that is not reachable or
not migrated yet is skipped, never a crash.
"""

from __future__ import annotations

import contextlib
import difflib
import reprlib
from collections.abc import Mapping
from typing import Any

from django.conf import settings as django_settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import DatabaseError, connections, router, transaction

from .conf import (
    BOOLEAN,
    DEFAULTS,
    NON_NEGATIVE,
    POSITIVE,
    SCHEDULE_NAME_MAX_LENGTH,
    USE_TZ_REASON,
    heartbeat_problem,
    is_number,
    queues_problems,
    retention_problems,
    setting_problem,
    text_problem,
)

NUMBER_KEYS = (*POSITIVE, *NON_NEGATIVE, "HEARTBEAT_SECONDS", "MAX_ATTEMPTS", "MAX_SNOOZES")
SCHEDULE_EXAMPLE = "For example {'cron': '0 2 * * *', 'job': 'reports.nightly'}."
#: How close a top-level setting's name must be to DJANGO_JOBS to be taken for it (difflib's
#: ratio): DJANGO_JOB is 0.95, DJANGO_Q 0.74.
LOOK_ALIKE = 0.85


def _key_errors(
    user: Mapping[str, Any], keys: tuple[str, ...], check_id: str
) -> list[CheckMessage]:
    """An error for each of ``keys`` whose value in ``user`` breaks its rule."""
    errors: list[CheckMessage] = []
    for key in keys:
        problem = setting_problem(key, user[key]) if key in user else None
        if problem is not None:
            errors.append(Error(problem.message, hint=problem.hint, id=check_id))
    return errors


def _queue_errors(queues: Any) -> list[CheckMessage]:
    return [
        Error(problem.message, hint=problem.hint, id="django_jobs.E004")
        for problem in queues_problems(queues)
    ]


def _unknown_key_errors(user: Mapping[str, Any]) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    for key in user:
        if key not in DEFAULTS:
            close = difflib.get_close_matches(str(key), list(DEFAULTS), n=1)
            hint = f"Did you mean {close[0]!r}?" if close else f"Known keys: {', '.join(DEFAULTS)}."
            errors.append(
                Error(f"Unknown DJANGO_JOBS key {key!r}.", hint=hint, id="django_jobs.E002")
            )
    return errors


def _look_alike_settings() -> list[CheckMessage]:
    """W013: a top-level setting spelled nearly as ``DJANGO_JOBS`` (``DJANGO_JOB``,
    ``DJANGOJOBS``): nothing reads it, so what it sets is silently not set."""
    names = [name for name in dir(django_settings) if name.isupper() and name != "DJANGO_JOBS"]
    alike = [
        name
        for name in names
        if name.replace("_", "") == "DJANGOJOBS"
        or difflib.get_close_matches("DJANGO_JOBS", [name], n=1, cutoff=LOOK_ALIKE)
    ]
    if hasattr(django_settings, "DJANGO_JOBS"):
        fix = "Move what it sets into DJANGO_JOBS, and remove it."
    else:
        fix = "Rename it DJANGO_JOBS."
    return [
        Warning(
            f"The setting {name!r} looks like DJANGO_JOBS, the one django-jobs reads: "
            "nothing reads it, so what it sets is not set.",
            hint=fix,
            id="django_jobs.W013",
        )
        for name in alike
    ]


@register(Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    look_alikes = _look_alike_settings()
    user = getattr(django_settings, "DJANGO_JOBS", {})
    if not isinstance(user, Mapping):
        return [
            Error(
                f"DJANGO_JOBS must be a dict, got {type(user).__name__} {reprlib.repr(user)}.",
                hint="For example DJANGO_JOBS = {'QUEUES': {'default': {'workers': 2}}}; "
                "leave it out to take every default.",
                id="django_jobs.E001",
            ),
            *look_alikes,
        ]
    errors = look_alikes + _unknown_key_errors(user)
    errors += _key_errors(user, NUMBER_KEYS, "django_jobs.E003")
    errors += _heartbeat_messages(user)
    errors += _retry_ceiling_warnings(user)
    errors += _key_errors(user, BOOLEAN, "django_jobs.E007")
    errors += _key_errors(user, ("PROCESSES",), "django_jobs.E011")
    errors += _key_errors(user, ("UNKNOWN_QUEUES",), "django_jobs.E013")
    errors += _key_errors(user, ("METRICS_TOKEN",), "django_jobs.E014")
    if "LISTEN_DATABASE" in user:
        errors += _listen_database_errors(user["LISTEN_DATABASE"])
    if "QUEUES" in user:
        errors += _queue_errors(user["QUEUES"])
    if "RETENTION" in user:
        errors += [
            Error(problem.message, hint=problem.hint, id="django_jobs.E008")
            for problem in retention_problems(user["RETENTION"])
        ]
    if "RECURRING" in user:
        errors += _recurring_errors(user["RECURRING"])
    if "HIDDEN_PAYLOAD_KEYS" in user:
        errors += _hidden_keys_errors(user["HIDDEN_PAYLOAD_KEYS"])
    return errors


def _listen_database_errors(alias: Any) -> list[CheckMessage]:
    """E012: a ``LISTEN_DATABASE`` that names no PostgreSQL database of ``DATABASES``."""
    problem = setting_problem("LISTEN_DATABASE", alias)
    if problem is not None:
        return [Error(problem.message, hint=problem.hint, id="django_jobs.E012")]
    if alias is None:
        return []
    where = f"DJANGO_JOBS['LISTEN_DATABASE'] ({alias!r})"
    if alias not in django_settings.DATABASES:
        close = difflib.get_close_matches(alias, list(django_settings.DATABASES), n=1)
        return [
            Error(
                f"{where} is not a database in DATABASES.",
                hint=f"Did you mean {close[0]!r}?"
                if close
                else f"Known: {', '.join(django_settings.DATABASES)}.",
                id="django_jobs.E012",
            )
        ]
    if connections[alias].vendor != "postgresql":
        return [
            Error(
                f"{where} is a {connections[alias].vendor} database: LISTEN is PostgreSQL's.",
                hint="Name an alias of the same PostgreSQL database the jobs are in, reached "
                "without a transaction-mode pooler; or leave LISTEN_DATABASE out.",
                id="django_jobs.E012",
            )
        ]
    return _listen_beside_other_jobs(where)


def _listen_beside_other_jobs(where: str) -> list[CheckMessage]:
    """W012: a PostgreSQL ``LISTEN_DATABASE`` while the jobs live in another kind of
    database, whose enqueues send no NOTIFY: the listener would never hear one."""
    from .models import Job

    jobs = router.db_for_write(Job)
    vendor = connections[jobs].vendor
    if vendor == "postgresql":
        return []
    return [
        Warning(
            f"{where} is a PostgreSQL database, but the jobs are in {jobs!r}, a {vendor} "
            "database, whose enqueues wake no one: nothing would ever be heard there.",
            hint="Leave LISTEN_DATABASE out: workers of jobs outside PostgreSQL poll "
            "every POLL_SECONDS.",
            id="django_jobs.W012",
        )
    ]


def _heartbeat_messages(user: Mapping[str, Any]) -> list[CheckMessage]:
    """E009: a beat that cannot keep the lease; W002: one the worker shortens to a third."""
    lease = user.get("LEASE_SECONDS", DEFAULTS["LEASE_SECONDS"])
    beat: Any = user.get("HEARTBEAT_SECONDS")
    problem = heartbeat_problem(lease, beat)
    if problem is not None:
        return [Error(problem.message, hint=problem.hint, id="django_jobs.E009")]
    if not (is_number(lease) and lease > 0 and is_number(beat) and beat > lease / 3):
        return []
    return [
        Warning(
            f"DJANGO_JOBS['HEARTBEAT_SECONDS'] ({beat!r}) is longer than a third of "
            f"DJANGO_JOBS['LEASE_SECONDS'] ({lease!r}): the worker renews leases every "
            f"{lease / 3:g} s instead, so that a lease spans three beats and one slow "
            "renewal does not lose it.",
            hint=f"Set HEARTBEAT_SECONDS to {lease / 3:g} or less (or None: a third of the "
            f"lease), or raise LEASE_SECONDS to {beat * 3:g} or more.",
            id="django_jobs.W002",
        )
    ]


def _retry_ceiling_warnings(user: Mapping[str, Any]) -> list[CheckMessage]:
    """W005: a first retry delay above the ceiling, so that every retry waits the ceiling."""
    base = user.get("RETRY_BASE_SECONDS", DEFAULTS["RETRY_BASE_SECONDS"])
    ceiling = user.get("RETRY_MAX_SECONDS", DEFAULTS["RETRY_MAX_SECONDS"])
    if not (is_number(base) and is_number(ceiling) and 0 < ceiling < base):
        return []
    return [
        Warning(
            f"DJANGO_JOBS['RETRY_BASE_SECONDS'] ({base!r}) is above "
            f"DJANGO_JOBS['RETRY_MAX_SECONDS'] ({ceiling!r}): every retry waits "
            f"{ceiling!r} s (plus jitter), with no backoff between them.",
            hint="RETRY_BASE_SECONDS is the first retry's delay, doubled at each later one; "
            "RETRY_MAX_SECONDS is the ceiling. Lower the first, or raise the second.",
            id="django_jobs.W005",
        )
    ]


def _hidden_keys_errors(patterns: Any) -> list[CheckMessage]:
    from .redaction import validate_patterns

    return [
        Error(
            f"DJANGO_JOBS['HIDDEN_PAYLOAD_KEYS'] {problem}.",
            hint="Give a list of regular expressions, matched case-insensitively against "
            "payload key names, e.g. ['^card$', 'iban'].",
            id="django_jobs.E020",
        )
        for problem in validate_patterns(patterns)
    ]


def _recurring_errors(recurring: Any) -> list[CheckMessage]:
    if not isinstance(recurring, Mapping):
        return [
            Error(
                "DJANGO_JOBS['RECURRING'] must be a dict of schedule name -> options, "
                f"got {type(recurring).__name__} {reprlib.repr(recurring)}.",
                hint=f"Give {{'nightly': {{...}}}}. {SCHEDULE_EXAMPLE}",
                id="django_jobs.E005",
            )
        ]
    errors: list[CheckMessage] = []
    for name, options in recurring.items():
        errors += _schedule_entry_errors(name, options)
    return errors


def _schedule_entry_errors(name: Any, options: Any) -> list[CheckMessage]:
    """E005 for an entry's shape (name, dict, keys), E006 for what would keep it from firing."""
    from .recurring import SCHEDULE_KEYS

    where = f"DJANGO_JOBS['RECURRING'][{name!r}]"
    errors: list[CheckMessage] = []
    wrong_name = text_problem(name, SCHEDULE_NAME_MAX_LENGTH)
    if wrong_name:
        errors.append(
            Error(
                f"A schedule name in DJANGO_JOBS['RECURRING'] {wrong_name}: {reprlib.repr(name)}.",
                hint="Name it for what it does, e.g. 'nightly-report'.",
                id="django_jobs.E005",
            )
        )
    if not isinstance(options, Mapping):
        return [
            *errors,
            Error(
                f"{where} must be a dict of options, got {reprlib.repr(options)}.",
                hint=SCHEDULE_EXAMPLE,
                id="django_jobs.E005",
            ),
        ]
    missing = [key for key in ("cron", "job") if key not in options]
    if missing:
        errors.append(
            Error(
                f"{where} must be a dict with at least 'cron' and 'job'; it has no "
                f"{' and no '.join(map(repr, missing))}.",
                hint=SCHEDULE_EXAMPLE,
                id="django_jobs.E005",
            )
        )
    for key in options:
        if key not in SCHEDULE_KEYS:
            close = difflib.get_close_matches(str(key), sorted(SCHEDULE_KEYS), n=1)
            hint = (
                f"Did you mean {close[0]!r}?"
                if close
                else f"Known keys: {', '.join(sorted(SCHEDULE_KEYS))}."
            )
            errors.append(
                Error(f"{where} has an unknown key {key!r}.", hint=hint, id="django_jobs.E005")
            )
    for flag in ("enabled", "overlap"):
        if flag in options and not isinstance(options[flag], bool):
            errors.append(
                Error(
                    f"{where}[{flag!r}] must be True or False, got {options[flag]!r}.",
                    hint=f"Write {flag!r}: True or {flag!r}: False.",
                    id="django_jobs.E006",
                )
            )
    if not missing:
        errors += _schedule_parts_errors(where, options)
    return errors


def _schedule_parts_errors(where: str, options: Mapping[str, Any]) -> list[CheckMessage]:
    from .recurring import check_schedule_parts

    problem = _schedule_problem(
        check_schedule_parts,
        options["cron"],
        options["job"],
        options.get("payload"),
        options.get("timezone", "UTC"),
        queue=options.get("queue"),
        priority=options.get("priority"),
        max_attempts=options.get("max_attempts"),
    )
    if problem is None:
        return []
    message, hint = problem
    return [Error(f"{where}: {message}", hint=hint, id="django_jobs.E006")]


def _schedule_problem(check: Any, *args: Any, **kwargs: Any) -> tuple[str, str] | None:
    """What keeps a schedule's parts from firing, with the fix, or None."""
    from .exceptions import JobsError, PayloadError, UnknownJob

    try:
        check(*args, **kwargs)
    except UnknownJob as exc:
        return str(exc), (
            "Register the job with @job in a module that is imported at start-up (an app's "
            "jobs.py is), or name a registered job."
        )
    except PayloadError as exc:
        return str(exc), "Give a payload that JSON can encode: dicts, lists, str, numbers, bools."
    except JobsError as exc:
        return str(exc), (
            "A cron is five fields (minute hour day-of-month month day-of-week) or @hourly, "
            "@daily, @weekly, @monthly, @yearly; a time zone is an IANA name such as "
            "'Europe/Paris'."
        )
    return None


@register(Tags.compatibility)
def check_database(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """What keeps the jobs database from serving at all (E030: SQLite too old)."""
    from .db import get_driver
    from .models import Job

    return get_driver(router.db_for_write(Job)).check_configuration()


@register(Tags.database)
def check_live_database(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """The jobs database's settings and what only the live database can tell: SQLite's
    transaction mode (W001) and journal mode (W003), the schedule rows (W004).

    Django runs it only with ``databases`` (``check --database``, ``migrate``), and
    ``runjobs`` at start-up: a warning about the database is shown where the database is
    set up and served, not on every ``manage.py`` command.
    """
    from .db import get_driver
    from .models import Job

    using = router.db_for_write(Job)
    if not databases or using not in databases:
        return []
    return [
        *get_driver(using).check_database(),
        *_schedule_row_warnings(using),
        *_health_warnings(using),
    ]


def _health_warnings(using: str) -> list[CheckMessage]:
    """W020: a transaction open past ``HEALTH_HORIZON_SECONDS`` holds back the cleanup of
    the jobs tables' dead rows (:mod:`django_jobs.health`)."""
    from . import health

    return [
        Warning(
            f"Jobs tables: {problem}.",
            hint="See the observability guide's 'The health of the jobs table'.",
            id="django_jobs.W020",
        )
        for problem in health.problems(health.read(using))
    ]


def _schedule_row_warnings(using: str) -> list[CheckMessage]:
    """W004: an enabled schedule row, not declared in settings, that cannot fire.

    Schedules added in code (``add_recurring_job``) were checked when saved,
    but their job may have been renamed or removed since. Those declared in
    ``DJANGO_JOBS['RECURRING']`` are E005/E006's, and resynced at start-up.
    """
    from .models import RecurringJob
    from .recurring import check_schedule_parts

    user = getattr(django_settings, "DJANGO_JOBS", {})
    declared = user.get("RECURRING") if isinstance(user, Mapping) else None
    names = (  # a name no row can have (E005's) is left out of the query, which it would break
        [name for name in declared if text_problem(name, SCHEDULE_NAME_MAX_LENGTH) is None]
        if isinstance(declared, Mapping)
        else []
    )
    schedules = RecurringJob.objects.using(using).filter(enabled=True).exclude(name__in=names)
    try:
        # Inside a transaction (a test's, say), a savepoint keeps a failed read from
        # breaking it; outside one, the read is its own.
        inside = connections[using].in_atomic_block
        with transaction.atomic(using=using) if inside else contextlib.nullcontext():
            rows = list(schedules.order_by("name"))
    except DatabaseError:
        return []  # not reachable, or not migrated yet (this runs before `migrate` does)
    warnings: list[CheckMessage] = []
    for row in rows:
        problem = _schedule_problem(
            check_schedule_parts,
            row.cron,
            row.job_name,
            row.payload,
            row.timezone,
            queue=row.queue,
            priority=row.priority,
            max_attempts=row.max_attempts,
        )
        if problem is not None:
            warnings.append(_schedule_row_warning(row.name, *problem))
    return warnings


def _schedule_row_warning(name: str, message: str, fix: str) -> CheckMessage:
    return Warning(
        f"Recurring job {name!r} (in the database) cannot fire: {message}. Until it is fixed "
        "the scheduler skips each of its occurrences, logging recurring_error (a cron with "
        "no next occurrence disables it).",
        hint=f"{fix} Or change the schedule with add_recurring_job({name!r}, ...), disable "
        f"it in the admin, or delete it with remove_recurring_job({name!r}).",
        id="django_jobs.W004",
    )


@register(Tags.compatibility)
def check_use_tz(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    if django_settings.USE_TZ:
        return []
    return [
        Error(
            USE_TZ_REASON,
            hint="Set USE_TZ = True in your settings (Django's default); datetimes are then "
            "stored in UTC and shown in TIME_ZONE.",
            id="django_jobs.E010",
        )
    ]


@register(Tags.compatibility)
def check_queues_served(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Warn of registered jobs on a queue that ``DJANGO_JOBS['QUEUES']`` does not list."""
    from .registry import get_definition, registered_names

    user = getattr(django_settings, "DJANGO_JOBS", {})
    queues = user.get("QUEUES", DEFAULTS["QUEUES"]) if isinstance(user, Mapping) else None
    if not isinstance(queues, Mapping):
        return []  # E001 or E004 says what is wrong
    unserved: dict[str, list[str]] = {}
    for name in registered_names():
        queue = get_definition(name).queue
        if queue not in queues:
            unserved.setdefault(queue, []).append(name)
    warnings = [_unserved_warning(queue, names) for queue, names in sorted(unserved.items())]
    return warnings + _unserved_schedule_warnings(user, queues)


def _unserved_schedule_warnings(
    user: Mapping[str, Any], queues: Mapping[Any, Any]
) -> list[CheckMessage]:
    """W010 for a ``RECURRING`` entry whose own ``queue`` ``QUEUES`` does not list."""
    recurring = user.get("RECURRING")
    if not isinstance(recurring, Mapping):
        return []  # E005 says what is wrong
    warnings: list[CheckMessage] = []
    for name, options in recurring.items():
        queue = options.get("queue") if isinstance(options, Mapping) else None
        if isinstance(queue, str) and queue and queue not in queues:
            warnings.append(
                Warning(
                    f"DJANGO_JOBS['RECURRING'][{name!r}] enqueues on queue {queue!r}, which "
                    "DJANGO_JOBS['QUEUES'] does not list: `runjobs` without --queue never "
                    "runs its jobs.",
                    hint=f"Add {queue!r} to DJANGO_JOBS['QUEUES'], or run a worker with "
                    f"`manage.py runjobs --queue {queue}` and silence django_jobs.W010.",
                    id="django_jobs.W010",
                )
            )
    return warnings


def _unserved_warning(queue: str, names: list[str]) -> CheckMessage:
    jobs, verb, them = ("Jobs", "are", "them") if len(names) > 1 else ("Job", "is", "it")
    return Warning(
        f"{jobs} {', '.join(map(repr, names))} {verb} on queue {queue!r}, which "
        f"DJANGO_JOBS['QUEUES'] does not list: `runjobs` without --queue never runs {them}.",
        hint=f"Add {queue!r} to DJANGO_JOBS['QUEUES'], or run a worker with "
        f"`manage.py runjobs --queue {queue}` and silence django_jobs.W010.",
        id="django_jobs.W010",
    )


@register(Tags.compatibility)
def check_jobs_reached(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """W006: a job registered from a module a worker does not import (see
    :mod:`django_jobs.reach`). The URLconf is imported first, as Django's URL check
    does, so that the jobs of the modules views import are registered by then; those of a
    module not imported even then (a view imports it inside the view) are read from the
    project apps' source."""
    from .reach import unimported_declarations
    from .registry import unreached_jobs

    import_url_config()
    registered: list[CheckMessage] = [
        Warning(
            f"Job {name!r} is registered in {module!r}, a module imported only after "
            "start-up (by a view or the URLconf, say): `runjobs` does not import it, so its "
            "jobs wait, pending, for a worker that knows it.",
            hint=f"Define it in an installed app's jobs.py, or import {module!r} from there.",
            id="django_jobs.W006",
        )
        for name, module in unreached_jobs()
    ]
    # A module imported inside a view is not imported yet: its source says what it declares.
    read = [
        Warning(
            f"Job {found.name!r} is declared in {found.module!r} ({found.path.name}, line "
            f"{found.line}), a module nothing imports as the apps load: `runjobs` will not "
            "import it, so its jobs would wait, pending, for a worker that knows it.",
            hint=f"Define it in an installed app's jobs.py, or import {found.module!r} from there.",
            id="django_jobs.W006",
        )
        for found in unimported_declarations()
    ]
    return registered + read


def import_url_config() -> None:
    """Import ``ROOT_URLCONF`` and what it includes, if it is set and imports; Django's
    URL check says what keeps it from importing."""
    if not getattr(django_settings, "ROOT_URLCONF", None):
        return
    from django.urls import get_resolver

    with contextlib.suppress(Exception):
        get_resolver().url_patterns  # noqa: B018  (imports the URLconf's modules)

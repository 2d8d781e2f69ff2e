"""System checks for the ``DJANGO_JOBS`` setting and the database it runs on."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from django.conf import settings as django_settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import router

from .conf import (
    BOOLEAN,
    DEFAULTS,
    NON_NEGATIVE,
    POSITIVE,
    USE_TZ_REASON,
    queues_problems,
    retention_problems,
    setting_problem,
)

NUMBER_KEYS = (*POSITIVE, *NON_NEGATIVE, "HEARTBEAT_SECONDS", "MAX_ATTEMPTS")


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


@register(Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    user = getattr(django_settings, "DJANGO_JOBS", {})
    if not isinstance(user, Mapping):
        return [
            Error(f"DJANGO_JOBS must be a dict, got {type(user).__name__}.", id="django_jobs.E001")
        ]
    errors: list[CheckMessage] = []
    for key in user:
        if key not in DEFAULTS:
            close = difflib.get_close_matches(str(key), list(DEFAULTS), n=1)
            hint = f"Did you mean {close[0]!r}?" if close else f"Known keys: {', '.join(DEFAULTS)}."
            errors.append(
                Error(f"Unknown DJANGO_JOBS key {key!r}.", hint=hint, id="django_jobs.E002")
            )
    errors += _key_errors(user, NUMBER_KEYS, "django_jobs.E003")
    errors += _key_errors(user, BOOLEAN, "django_jobs.E007")
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
    from .exceptions import JobsError
    from .recurring import SCHEDULE_KEYS, check_schedule_parts

    if not isinstance(recurring, Mapping):
        return [
            Error(
                "DJANGO_JOBS['RECURRING'] must be a dict of schedule name -> options, "
                f"got {type(recurring).__name__}.",
                id="django_jobs.E005",
            )
        ]
    errors: list[CheckMessage] = []
    for name, options in recurring.items():
        where = f"DJANGO_JOBS['RECURRING'][{name!r}]"
        if not isinstance(options, Mapping) or "cron" not in options or "job" not in options:
            errors.append(
                Error(
                    f"{where} must be a dict with at least 'cron' and 'job'.", id="django_jobs.E005"
                )
            )
            continue
        unknown = sorted(set(options) - SCHEDULE_KEYS)
        if unknown:
            errors.append(
                Error(
                    f"{where} has unknown keys {unknown}.",
                    hint=f"Known keys: {', '.join(sorted(SCHEDULE_KEYS))}.",
                    id="django_jobs.E005",
                )
            )
        try:
            check_schedule_parts(
                options["cron"],
                options["job"],
                options.get("payload"),
                options.get("timezone", "UTC"),
                queue=options.get("queue"),
                priority=options.get("priority"),
                max_attempts=options.get("max_attempts"),
            )
        except JobsError as exc:
            errors.append(Error(f"{where}: {exc}", id="django_jobs.E006"))
    return errors


@register(Tags.compatibility)
def check_database(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    from .db import get_driver
    from .models import Job

    return get_driver(router.db_for_write(Job)).check_configuration()


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
    return [_unserved_warning(queue, names) for queue, names in sorted(unserved.items())]


def _unserved_warning(queue: str, names: list[str]) -> CheckMessage:
    jobs, verb, them = ("Jobs", "are", "them") if len(names) > 1 else ("Job", "is", "it")
    return Warning(
        f"{jobs} {', '.join(map(repr, names))} {verb} on queue {queue!r}, which "
        f"DJANGO_JOBS['QUEUES'] does not list: `runjobs` without --queue never runs {them}.",
        hint=f"Add {queue!r} to DJANGO_JOBS['QUEUES'], or run a worker with "
        f"`manage.py runjobs --queue {queue}` and silence django_jobs.W010.",
        id="django_jobs.W010",
    )

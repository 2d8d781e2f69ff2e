"""System checks for the ``DJANGO_JOBS`` setting and the database it runs on."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from django.conf import settings as django_settings
from django.core.checks import CheckMessage, Error, Tags, register
from django.db import router

from .conf import DEFAULTS

NON_NEGATIVE = ("RETRY_BASE_SECONDS", "RETRY_JITTER", "SHUTDOWN_GRACE_SECONDS")
POSITIVE = (
    "LEASE_SECONDS",
    "POLL_SECONDS",
    "MAINTENANCE_SECONDS",
    "RETRY_MAX_SECONDS",
    "MAX_PAYLOAD_BYTES",
)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number_errors(user: Mapping[str, Any]) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    for key in POSITIVE + NON_NEGATIVE:
        if key not in user:
            continue
        value = user[key]
        if not _is_number(value) or value < 0 or (key in POSITIVE and value == 0):
            kind = "a positive" if key in POSITIVE else "a non-negative"
            errors.append(
                Error(
                    f"DJANGO_JOBS[{key!r}] must be {kind} number, got {value!r}.",
                    id="django_jobs.E003",
                )
            )
    beat = user.get("HEARTBEAT_SECONDS")
    if beat is not None and (not _is_number(beat) or beat <= 0):
        errors.append(
            Error(
                f"DJANGO_JOBS['HEARTBEAT_SECONDS'] must be a positive number or "
                f"None, got {beat!r}.",
                id="django_jobs.E003",
            )
        )
    attempts = user.get("MAX_ATTEMPTS", 1)
    if not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 1:
        errors.append(
            Error(
                f"DJANGO_JOBS['MAX_ATTEMPTS'] must be a positive integer, got {attempts!r}.",
                id="django_jobs.E003",
            )
        )
    return errors


def _queue_errors(queues: Any) -> list[CheckMessage]:
    if not isinstance(queues, Mapping) or not queues:
        return [
            Error(
                "DJANGO_JOBS['QUEUES'] must be a non-empty dict of queue name -> options, "
                f"got {queues!r}.",
                id="django_jobs.E004",
            )
        ]
    errors: list[CheckMessage] = []
    for name, options in queues.items():
        workers = (options or {}).get("workers", 1) if isinstance(options, Mapping) else None
        if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
            errors.append(
                Error(
                    f"DJANGO_JOBS['QUEUES'][{name!r}] must be a dict whose 'workers' is a positive "
                    f"integer, got {options!r}.",
                    id="django_jobs.E004",
                )
            )
    return errors


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
    errors += _number_errors(user)
    if "QUEUES" in user:
        errors += _queue_errors(user["QUEUES"])
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
    from .claims import get_claimer
    from .models import Job

    return get_claimer(router.db_for_write(Job)).check_configuration()

"""The ``DJANGO_JOBS`` settings dict, with a default for every key.

Values are read from ``django.conf.settings`` on each access, so tests that
use ``override_settings`` see their values at once. Each value is checked by
the same rules as the system check (:mod:`django_jobs.checks`), so a worker
started without the checks refuses a bad value with the check's words
instead of failing later in a way that hides it.
"""

from __future__ import annotations

import difflib
import math
import os
import reprlib
from collections.abc import Mapping
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Any, NamedTuple

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone
from django.utils.module_loading import import_string

from .text import UNSTORABLE, is_number_text

DEFAULTS: dict[str, Any] = {
    # queue name -> options; "workers" is the number of handler threads, "async_concurrency"
    # how many of its async handlers run at once on the worker's event loop (default 100).
    "QUEUES": {"default": {"workers": 2}},
    # How long a claim holds a job before another worker may take it back.
    "LEASE_SECONDS": 300,
    # How long an idle worker waits before it looks for due jobs again.
    "POLL_SECONDS": 1,
    # How often a worker renews the lease of a running job; None: a third of the lease.
    "HEARTBEAT_SECONDS": None,
    # How long a stopping worker waits for running handlers before handing their jobs back.
    "SHUTDOWN_GRACE_SECONDS": 20,
    # How often the leader takes back jobs whose lease has expired and prunes finished ones.
    "MAINTENANCE_SECONDS": 15,
    # How long the leader's lease holds unless renewed (every third of it): one process
    # per database runs the rescuer, the recurring scheduler and the pruning.
    "LEADER_LEASE_SECONDS": 30,
    # A dispatcher claims the next jobs while its threads run the current ones, as long as
    # its queue's jobs take less than this on average (seconds); 0: never.
    "CLAIM_AHEAD_SECONDS": 0.01,
    # A worker warns when its event loop (async handlers) has not turned for this long
    # (seconds): a coroutine is running blocking code.
    "ASYNC_BLOCKED_SECONDS": 0.5,
    # How often a worker logs how many outcomes it wrote since its last summary; 0: never.
    "SUMMARY_SECONDS": 60,
    "MAX_ATTEMPTS": 5,
    # How many times a job may snooze (raise Snooze) before it is dead-lettered.
    "MAX_SNOOZES": 100,
    "RETRY_BASE_SECONDS": 30,
    "RETRY_MAX_SECONDS": 3600,
    "RETRY_JITTER": 0.2,
    "MAX_PAYLOAD_BYTES": 1024 * 1024,
    # Regexes of payload key names whose values are masked, besides Django's (API, KEY, ...).
    "HIDDEN_PAYLOAD_KEYS": (),
    # name -> {"cron", "job", "payload", "timezone", "queue", ...}; synced by runjobs.
    "RECURRING": {},
    # Prepare the hot-path statements on PostgreSQL; False behind a pooler that cannot.
    "PREPARED_STATEMENTS": True,
    # Worker processes `runjobs` starts under one supervisor (`--processes`); "auto": one per core.
    "PROCESSES": 1,
    # On PostgreSQL: enqueueing NOTIFYs, and idle workers LISTEN instead of waiting a poll.
    "LISTEN": True,
    # The DATABASES alias a worker LISTENs on; None: the jobs' own. Behind a pooler in
    # transaction mode, one that reaches the same database directly (or a session pool).
    "LISTEN_DATABASE": None,
    # What schedule_job() onto a queue the project names nowhere does (a typo, most likely):
    # "warn" logs it once per queue and process, "error" refuses it with a ValueError.
    "UNKNOWN_QUEUES": "warn",
    # The bearer token a scraper gives django_jobs.metrics.view (Authorization: Bearer
    # ...); None: only staff users may read it. At least 16 characters.
    "METRICS_TOKEN": None,
    # A transaction open longer than this (seconds) holds back the cleanup of the jobs
    # tables' dead rows: jobs status, the dashboard, check W020 and the leader warn of it.
    "HEALTH_HORIZON_SECONDS": 300,
    # finished status -> how long its jobs are kept after they finish; None: forever.
    # A user's dict replaces only the statuses it names.
    "RETENTION": {
        "succeeded": timedelta(days=7),
        "cancelled": timedelta(days=7),
        "dead_lettered": timedelta(days=30),
    },
}

POSITIVE = (
    "ASYNC_BLOCKED_SECONDS",
    "HEALTH_HORIZON_SECONDS",
    "LEASE_SECONDS",
    "POLL_SECONDS",
    "MAINTENANCE_SECONDS",
    "LEADER_LEASE_SECONDS",
    "RETRY_MAX_SECONDS",
    "MAX_PAYLOAD_BYTES",
)
NON_NEGATIVE = (
    "RETRY_BASE_SECONDS",
    "RETRY_JITTER",
    "SHUTDOWN_GRACE_SECONDS",
    "SUMMARY_SECONDS",
    "CLAIM_AHEAD_SECONDS",
)
BOOLEAN = ("LISTEN", "PREPARED_STATEMENTS")
UNKNOWN_QUEUE_CHOICES = ("warn", "error")
#: The shortest METRICS_TOKEN: anything shorter is guessed.
MIN_TOKEN_LENGTH = 16
QUEUE_OPTIONS = ("workers", "async_concurrency", "timeout", "global_limit", "rate_limit")
#: How many async handlers of a queue run at once when its options do not say.
ASYNC_CONCURRENCY = 100
#: A rate limit's window, by the letter or word after its "/".
RATE_WINDOWS = {"s": 1, "second": 1, "m": 60, "minute": 60, "h": 3600, "hour": 3600}
#: The most a concurrency limit (global or per key) or a rate's count may be.
MAX_LIMIT = 1_000_000
CONCURRENCY_KEY_MAX_LENGTH = 200
# The statuses RETENTION may name: the finished ones (JobStatus values; no model import here).
RETENTION_STATUSES = ("succeeded", "cancelled", "dead_lettered")

# The longest retention: about a thousand years. Longer ones mean "forever" (None), and
# a cut-off of now minus a million days is before year 1, which no datetime can hold.
MAX_RETENTION = timedelta(days=365_000)

#: The longest delay django-jobs turns into a date (a snooze, a retry's backoff, a setting of
#: seconds): about a century. A longer one is refused: a millisecond epoch taken for seconds
#: (about 1.7e12) is past the last date a datetime can hold.
MAX_DELAY_SECONDS = 100 * 365 * 86400
#: The largest RETRY_JITTER: a retry waits at most this many times its backoff more.
MAX_JITTER = 10

# The range of the database's integer columns (priority, max_attempts).
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
# The models' max_lengths (no model import here; tests/unit/test_argument_limits.py holds
# them to the fields).
QUEUE_NAME_MAX_LENGTH = 100  # Job.queue, RecurringJob.queue
JOB_NAME_MAX_LENGTH = 200  # Job.name, RecurringJob.job_name
SCHEDULE_NAME_MAX_LENGTH = 200  # RecurringJob.name, Job.schedule
UNIQUE_KEY_MAX_LENGTH = 255  # Job.unique_key
CRON_MAX_LENGTH = 200  # RecurringJob.cron

# The most worker processes one `runjobs` supervises: each holds its own connections.
MAX_PROCESSES = 1024

USE_TZ_REASON = (
    "django-jobs needs USE_TZ = True: lease expiry and schedule times are compared "
    "across hosts and with the database's clock, in UTC."
)


class Problem(NamedTuple):
    """What is wrong with a setting: a message naming the key, and a hint or None."""

    message: str
    hint: str | None = None


def is_number(value: Any) -> bool:
    """An int or a finite float; not a bool, not NaN, not infinity."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value)


def is_int(value: Any, low: int = INT_MIN, high: int = INT_MAX) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def text_problem(text: Any, max_length: int, *, blank: bool = False) -> str | None:
    """Why ``text`` cannot go in a text column of ``max_length`` characters, or None.

    It must be a non-empty string (not blank either, unless ``blank``) that every
    database stores as given: PostgreSQL refuses a NUL character, and neither
    database takes a lone surrogate.
    """
    if (
        not isinstance(text, str)
        or not (text if blank else text.strip())
        or len(text) > max_length
        or UNSTORABLE.search(text)
    ):
        return (
            f"must be a non-empty string of at most {max_length} characters without NUL "
            "characters or lone surrogates"
        )
    return None


def queue_name_problem(name: Any) -> str | None:
    """Why ``name`` cannot be a queue's name, or None."""
    return text_problem(name, QUEUE_NAME_MAX_LENGTH)


def max_attempts_problem(max_attempts: Any) -> str | None:
    """Why ``max_attempts`` cannot be a job's number of attempts, or None."""
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        return "must be a positive integer"
    if max_attempts > INT_MAX:
        return f"must be a positive integer of at most {INT_MAX}"
    return None


def priority_problem(priority: Any) -> str | None:
    """Why ``priority`` cannot be a job's priority, or None."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        return "must be an integer"
    if not is_int(priority):
        return f"must be from {INT_MIN} to {INT_MAX}"
    return None


def cpu_cores() -> int:
    """The cores this process may run on (its CPU affinity where the system says): what
    ``PROCESSES = "auto"`` starts one worker process for."""
    if hasattr(os, "process_cpu_count"):  # Python 3.13
        return os.process_cpu_count() or 1
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def processes_problem(processes: Any) -> str | None:
    """Why ``processes`` cannot be a number of worker processes, or None."""
    if processes == "auto" or is_int(processes, 1, MAX_PROCESSES):
        return None
    return f"must be a whole number from 1 to {MAX_PROCESSES}, or 'auto' (one per core)"


def refuse(argument: str, problem: str | None, value: Any) -> None:
    """:class:`ValueError` naming ``argument``, its ``problem`` and ``value`` (shortened)."""
    if problem:
        raise ValueError(f"{argument} {problem}, got {reprlib.repr(value)}")


def require_text(text: Any, argument: str, max_length: int, *, blank: bool = False) -> str:
    """``text`` if it can go in its column; else :class:`ValueError` naming ``argument``."""
    refuse(argument, text_problem(text, max_length, blank=blank), text)
    return str(text)


def require_queue_name(queue: Any, argument: str = "queue") -> str:
    """``queue`` if it can be a queue's name; else :class:`ValueError` naming ``argument``."""
    return require_text(queue, argument, QUEUE_NAME_MAX_LENGTH)


def require_priority(priority: Any, argument: str = "priority") -> int:
    """``priority`` if it can be a job's priority; else :class:`ValueError` naming ``argument``."""
    refuse(argument, priority_problem(priority), priority)
    return int(priority)


def require_max_attempts(max_attempts: Any, argument: str = "max_attempts") -> int:
    """``max_attempts`` if a job can have it; else :class:`ValueError` naming ``argument``."""
    refuse(argument, max_attempts_problem(max_attempts), max_attempts)
    return int(max_attempts)


def check_job_options(
    *,
    queue: Any,
    priority: Any,
    max_attempts: Any,
    unique_key: Any = None,
    schedule: Any = None,
    concurrency_key: Any = None,
) -> None:
    """``ValueError`` for an option no job can have (None: the default, or none).

    What :func:`~django_jobs.scheduling.build_job` checks of every new job, and the
    recurring schedules of theirs, so a schedule is refused when it is saved rather
    than on every tick.
    """
    if max_attempts is not None:
        require_max_attempts(max_attempts)
    if priority is not None:
        require_priority(priority)
    if queue is not None:
        require_queue_name(queue)
    if unique_key is not None:
        require_text(unique_key, "unique_key", UNIQUE_KEY_MAX_LENGTH, blank=True)
    if schedule is not None:
        require_text(schedule, "schedule", SCHEDULE_NAME_MAX_LENGTH)
    if concurrency_key is not None:
        require_text(concurrency_key, "concurrency_key", CONCURRENCY_KEY_MAX_LENGTH)


def resolve_run_at(run_at: Any, delay: Any, now: datetime | None = None) -> datetime:
    """When a new job is due: ``run_at``, or ``delay`` from now (``now``, else the clock's),
    or now; ``ValueError`` for both, or a value no job can have."""
    require_use_tz()
    if run_at is not None and delay is not None:
        raise ValueError("give run_at or delay, not both")
    now = now or timezone.now()
    if delay is not None:
        if not isinstance(delay, timedelta):
            raise ValueError(f"delay must be a timedelta, got {delay!r}")
        try:
            return now + delay
        except OverflowError:
            raise ValueError(
                f"delay must keep run_at within the years 1 to 9999, got {delay!r}"
            ) from None
    if run_at is None:
        return now
    if not isinstance(run_at, datetime):
        raise ValueError(f"run_at must be a datetime, got {run_at!r}")
    if timezone.is_naive(run_at):
        raise ValueError("run_at must be timezone-aware")
    try:
        run_at.astimezone(dt_timezone.utc)  # as SQLite stores it: the calendar's ends overflow
    except OverflowError:
        raise ValueError(f"run_at must be from year 1 to 9999 in UTC, got {run_at!r}") from None
    return run_at


def setting_problem(key: str, value: Any) -> Problem | None:
    """What is wrong with ``DJANGO_JOBS[key] = value`` (the keys with rules here), or None."""
    where = f"DJANGO_JOBS[{key!r}]"
    if key in POSITIVE and not (is_number(value) and value > 0):
        return Problem(
            f"{where} must be a positive finite number, got {value!r}.", number_hint(key, value)
        )
    if key in NON_NEGATIVE and not (is_number(value) and value >= 0):
        return Problem(
            f"{where} must be a non-negative finite number, got {value!r}.",
            number_hint(key, value),
        )
    if key == "HEARTBEAT_SECONDS" and value is not None and not (is_number(value) and value > 0):
        return Problem(
            f"{where} must be a positive finite number or None, got {value!r}.",
            number_hint(key, value),
        )
    if key.endswith("_SECONDS") and is_number(value) and value > MAX_DELAY_SECONDS:
        return Problem(
            f"{where} must be at most {MAX_DELAY_SECONDS} seconds (about a century), "
            f"got {value!r}.",
            number_hint(key, value),
        )
    if key == "RETRY_JITTER" and is_number(value) and value > MAX_JITTER:
        return Problem(
            f"{where} must be at most {MAX_JITTER}, got {value!r}.", number_hint(key, value)
        )
    if key in BOOLEAN and not isinstance(value, bool):
        return Problem(
            f"{where} must be True or False, got {value!r}.",
            f"Write {where}: True or False (a bool, not {type(value).__name__}).",
        )
    if key in ("MAX_ATTEMPTS", "MAX_SNOOZES") and not is_int(value, 1):
        return Problem(
            f"{where} must be an integer from 1 to {INT_MAX}, got {value!r}.",
            number_hint(key, value),
        )
    if key == "UNKNOWN_QUEUES" and value not in UNKNOWN_QUEUE_CHOICES:
        return Problem(
            f"{where} must be 'warn' or 'error', got {value!r}.",
            "'warn' logs a schedule_job() onto a queue the project names nowhere; 'error' "
            "refuses it.",
        )
    if key == "PROCESSES" and processes_problem(value):
        return Problem(
            f"{where} {processes_problem(value)}, got {value!r}.",
            f"Give a number of worker processes, e.g. 4 (a number, not text), or 'auto' "
            f"(this host: {cpu_cores()}).",
        )
    if key == "LISTEN_DATABASE" and value is not None and not (isinstance(value, str) and value):
        return Problem(
            f"{where} must be the name of a database in DATABASES, or None, got {value!r}.",
            "For example 'direct', with DATABASES['direct'] reaching the jobs' PostgreSQL "
            "database without the pooler; None listens on the jobs' own database.",
        )
    if (
        key == "METRICS_TOKEN"
        and value is not None
        and not (isinstance(value, str) and len(value) >= MIN_TOKEN_LENGTH and value.isprintable())
    ):
        got = "a shorter or unprintable one" if isinstance(value, str) else repr(value)
        return Problem(
            f"{where} must be a string of at least {MIN_TOKEN_LENGTH} printable characters,"
            f" or None, got {got}.",
            "Make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))', and"
            " read it from the environment rather than writing it in settings.py.",
        )
    if key == "QUEUES":
        problems = queues_problems(value)
        return problems[0] if problems else None
    if key == "RETENTION":
        problems = retention_problems(value)
        return problems[0] if problems else None
    return None


def number_hint(key: str, value: Any) -> str:
    """How to write ``DJANGO_JOBS[key]``: its unit, its range, an example."""
    example = DEFAULTS[key] if DEFAULTS[key] is not None else 100
    text = " (a number, not text)" if isinstance(value, str) else ""
    if key == "MAX_ATTEMPTS":
        return f"Give a whole number of attempts, at least 1, e.g. {example}{text}."
    if key == "MAX_SNOOZES":
        return f"Give a whole number of snoozes, at least 1, e.g. {example}{text}."
    if key == "MAX_PAYLOAD_BYTES":
        return f"Give a number of bytes above 0, e.g. {example}{text}."
    if key == "RETRY_JITTER":
        return f"Give a fraction of the delay, 0 or more, e.g. {example}{text}; 0: no jitter."
    if key == "HEARTBEAT_SECONDS":
        return f"Give seconds above 0{text}, or None for a third of LEASE_SECONDS."
    if key == "SUMMARY_SECONDS":
        return f"Give seconds, 0 or more, e.g. {example}{text}; 0: no summary."
    if key in NON_NEGATIVE:
        return f"Give seconds, 0 or more, e.g. {example}{text}."
    return f"Give seconds above 0, e.g. {example}{text}."


def heartbeat_problem(lease: Any, beat: Any) -> Problem | None:
    """Why a beat of ``beat`` seconds cannot keep a lease of ``lease`` seconds, or None.

    A lease that ends before its first renewal is no lease: every running job
    would be taken back by another worker while it runs. Values that break
    their own rule are left to :func:`setting_problem`.
    """
    if not (is_number(lease) and lease > 0 and is_number(beat) and beat > 0):
        return None
    if beat < lease:
        return None
    return Problem(
        f"DJANGO_JOBS['HEARTBEAT_SECONDS'] ({beat!r}) must be shorter than "
        f"DJANGO_JOBS['LEASE_SECONDS'] ({lease!r}): a lease would end before the beat that "
        "renews it.",
        f"Leave HEARTBEAT_SECONDS at None (a third of the lease: {lease / 3:g} s), or set it "
        f"to at most {lease / 3:g}.",
    )


def retention_problems(retention: Any) -> list[Problem]:
    """Everything wrong with a ``RETENTION`` value: its statuses and their durations."""
    where = "DJANGO_JOBS['RETENTION']"
    if not isinstance(retention, Mapping):
        return [
            Problem(
                f"{where} must be a dict of finished status -> timedelta or None, "
                f"got {retention!r}.",
                f"For example {{'succeeded': timedelta(days=7)}}; "
                f"statuses: {', '.join(RETENTION_STATUSES)}.",
            )
        ]
    problems: list[Problem] = []
    for status, kept in retention.items():
        if status not in RETENTION_STATUSES:
            close = difflib.get_close_matches(str(status), RETENTION_STATUSES, n=1)
            hint = (
                f"Did you mean {close[0]!r}?"
                if close
                else f"Known: {', '.join(RETENTION_STATUSES)} (pending and running jobs are "
                "never pruned)."
            )
            problems.append(Problem(f"{where} has an unknown status {status!r}.", hint))
        elif kept is not None and not (isinstance(kept, timedelta) and kept > timedelta(0)):
            problems.append(
                Problem(
                    f"{where}[{status!r}] must be a positive timedelta or None, got {kept!r}.",
                    "Give a duration as a timedelta: timedelta(days=7), not 7; "
                    "None keeps the jobs forever.",
                )
            )
        elif kept is not None and kept > MAX_RETENTION:
            problems.append(
                Problem(
                    f"{where}[{status!r}] must be at most {MAX_RETENTION.days} days, got "
                    f"{kept!r}: its cut-off would fall before the calendar's first years.",
                    "None keeps the jobs forever.",
                )
            )
    return problems


def queues_problems(queues: Any) -> list[Problem]:
    """Everything wrong with a ``QUEUES`` value: its names and each queue's options."""
    if not isinstance(queues, Mapping) or not queues:
        return [
            Problem(
                "DJANGO_JOBS['QUEUES'] must be a non-empty dict of queue name -> options, "
                f"got {queues!r}.",
                "For example {'default': {'workers': 2}, 'emails': {'workers': 1}}.",
            )
        ]
    problems: list[Problem] = []
    for name, options in queues.items():
        where = f"DJANGO_JOBS['QUEUES'][{name!r}]"
        wrong_name = queue_name_problem(name)
        if wrong_name:
            problems.append(
                Problem(
                    f"A queue name in DJANGO_JOBS['QUEUES'] {wrong_name}: {name!r}.",
                    "Name the queue as its jobs do: @job(queue='emails') is served by "
                    "QUEUES['emails'].",
                )
            )
        if not isinstance(options, Mapping):
            problems.append(
                Problem(
                    f"{where} must be a dict of options, got {options!r}.",
                    f"For example {{'workers': 2, 'timeout': 30}}; {{}} takes the defaults "
                    f"(options: {', '.join(QUEUE_OPTIONS)}).",
                )
            )
            continue
        problems += queue_options_problems(where, options)
    return problems


def queue_options_problems(where: str, options: Mapping[Any, Any]) -> list[Problem]:
    problems: list[Problem] = []
    for option in options:
        if option not in QUEUE_OPTIONS:
            close = difflib.get_close_matches(str(option), QUEUE_OPTIONS, n=1)
            hint = f"Did you mean {close[0]!r}?" if close else f"Known: {', '.join(QUEUE_OPTIONS)}."
            problems.append(Problem(f"{where} has an unknown option {option!r}.", hint))
    workers = options.get("workers", 1)
    if is_int(workers) and workers < 1:
        problems.append(
            Problem(
                f"{where}['workers'] must be a positive integer, got {workers!r}: a queue with "
                "no handler threads never runs its jobs.",
                "Give it 1 or more; to serve the queue elsewhere only, remove it from QUEUES "
                "and run that worker with `runjobs --queue NAME`.",
            )
        )
    elif not is_int(workers, 1):
        problems.append(
            Problem(
                f"{where}['workers'] must be a positive integer, got {workers!r}.",
                "Give a whole number of handler threads, e.g. {'workers': 2}.",
            )
        )
    concurrency = options.get("async_concurrency", ASYNC_CONCURRENCY)
    if not is_int(concurrency, 1):
        problems.append(
            Problem(
                f"{where}['async_concurrency'] must be a positive integer, got {concurrency!r}.",
                "It is how many of the queue's async handlers one worker process runs at "
                "once on its event loop, e.g. {'workers': 2, 'async_concurrency': 500}.",
            )
        )
    limit = options.get("global_limit")
    if limit is not None and concurrency_problem(limit):
        problems.append(
            Problem(
                f"{where}['global_limit'] {concurrency_problem(limit)} or None, got {limit!r}.",
                "It is how many of the queue's jobs may run at once across every worker, "
                "e.g. {'workers': 4, 'global_limit': 2}; None (or leaving it out) sets no limit.",
            )
        )
    rate = options.get("rate_limit")
    if rate is not None:
        try:
            parse_rate(rate)
        except ValueError as exc:
            problems.append(
                Problem(
                    f"{where}['rate_limit'] is not a rate: {str(exc).rstrip('.')}"
                    + ("" if str(exc).endswith("?") else "."),
                    "For example '100/m': at most 100 of the queue's jobs start in each "
                    "minute, across every worker. None sets no limit.",
                )
            )
    timeout = options.get("timeout")
    if timeout is not None and not (is_number(timeout) and timeout > 0):
        problems.append(
            Problem(
                f"{where}['timeout'] must be a positive finite number of seconds or None, "
                f"got {timeout!r}.",
                "Give seconds as a number: 30, not '30s'."
                if isinstance(timeout, str)
                else "Give seconds above 0, e.g. 30, or None for no timeout.",
            )
        )
    return problems


def parse_rate(rate: Any) -> tuple[int, int]:
    """``"100/m"`` as (100, 60): a count of jobs and a window in seconds (``s``, ``m``,
    ``h``, or ``second``, ``minute``, ``hour``); :class:`ValueError` saying what is wrong."""
    if not isinstance(rate, str) or rate.count("/") != 1:
        raise ValueError(f"a rate is 'COUNT/WINDOW', as '100/m', got {rate!r}")
    count_text, window = (part.strip().lower() for part in rate.split("/"))
    if window not in RATE_WINDOWS:
        guess = rate_window_guess(count_text, window)
        raise ValueError(
            f"a rate's window is s, m or h (per second, minute, hour), got {rate!r}{guess}"
        )
    if not is_number_text(count_text) or not 1 <= int(count_text) <= MAX_LIMIT:
        raise ValueError(f"a rate's count is a whole number from 1 to {MAX_LIMIT}, got {rate!r}")
    return int(count_text), RATE_WINDOWS[window]


def rate_window_guess(count_text: str, window: str) -> str:
    """``; did you mean '100/m'?`` for a window spelled another way (``min``, ``mins``,
    ``minutes``, ``sec``, ``hr``, ``hours``), or nothing."""
    unit = window[:1]
    if unit not in ("s", "m", "h") or not window.isalpha():
        return ""
    return f"; did you mean {f'{count_text}/{unit}'!r}?"


def runs_tasks(params: Any) -> bool:
    """Whether a ``TASKS`` entry's backend runs on django-jobs (``JobsBackend`` or a subclass)."""
    path = params.get("BACKEND") if isinstance(params, dict) else None
    if not isinstance(path, str):
        return False
    try:
        backend = import_string(path)
    except ImportError:
        return False  # Django's own check says so when the backend is used
    return bool(getattr(backend, "runs_on_django_jobs", False))


def concurrency_problem(limit: Any) -> str | None:
    """Why ``limit`` cannot be a concurrency limit, or None."""
    if not is_int(limit, 1, MAX_LIMIT):
        return f"must be a whole number from 1 to {MAX_LIMIT}"
    return None


def require_use_tz() -> None:
    """Raise :class:`ImproperlyConfigured` unless ``USE_TZ`` is True."""
    if not django_settings.USE_TZ:
        raise ImproperlyConfigured(f"{USE_TZ_REASON} Set USE_TZ = True in your settings.")


_UNCHECKED = object()


class JobsSettings:
    """Attribute access to ``settings.DJANGO_JOBS`` merged over :data:`DEFAULTS`.

    A value the system check would refuse raises :class:`ImproperlyConfigured`
    with the check's message.
    """

    def __init__(self) -> None:
        # The value each setting last passed its check as, by identity: the hot path reads
        # QUEUES per job, and checking it again each time cost a fifth of a no-op job.
        self._checked: dict[str, Any] = {}

    def user_settings(self) -> Mapping[str, Any]:
        value = getattr(django_settings, "DJANGO_JOBS", None)
        return value if isinstance(value, Mapping) else {}

    def __getattr__(self, key: str) -> Any:
        if key not in DEFAULTS:
            raise AttributeError(f"unknown django-jobs setting {key!r}")
        user = self.user_settings()
        if key not in user:
            return DEFAULTS[key]
        value = user[key]
        if self._checked.get(key, _UNCHECKED) is not value:
            problem = setting_problem(key, value)
            if problem is not None:
                raise ImproperlyConfigured(problem.message)
            self._checked[key] = value
        if key == "RETENTION":  # the statuses it names replace the defaults' only
            return {**DEFAULTS[key], **value}
        return value

    def validate(self) -> None:
        """Read every setting: :class:`ImproperlyConfigured` for the first bad value.

        Then the rules between settings that the system check makes errors of.
        """
        for key in DEFAULTS:
            getattr(self, key)
        problem = heartbeat_problem(self.LEASE_SECONDS, self.HEARTBEAT_SECONDS)
        if problem is not None:
            raise ImproperlyConfigured(problem.message)

    def heartbeat_seconds(self) -> float:
        """The beat: ``HEARTBEAT_SECONDS``, else a third of ``LEASE_SECONDS``."""
        lease = float(self.LEASE_SECONDS)
        beat = self.HEARTBEAT_SECONDS
        return min(float(beat), lease / 3) if beat is not None else lease / 3

    def call_timeout_seconds(self) -> float:
        """The deadline of one database call of the worker: a beat, at most 30 s."""
        return min(30.0, self.heartbeat_seconds())

    def process_count(self, processes: Any = None) -> int:
        """Worker processes to run: ``processes`` (``--processes``) if given, else
        ``PROCESSES``; ``"auto"`` is one per core. :class:`ValueError` for a bad value."""
        if processes is None:
            processes = self.PROCESSES
        else:
            refuse("--processes", processes_problem(processes), processes)
        return cpu_cores() if processes == "auto" else int(processes)

    def queue_workers(self, queue: str) -> int:
        """Handler threads for ``queue``: its ``workers`` option, else 1."""
        options = self.QUEUES.get(queue) or {}
        return int(options.get("workers", 1))

    def queue_async_concurrency(self, queue: str) -> int:
        """Async handlers of ``queue`` one process runs at once: its ``async_concurrency``
        option, else :data:`ASYNC_CONCURRENCY`."""
        options = self.QUEUES.get(queue) or {}
        return int(options.get("async_concurrency", ASYNC_CONCURRENCY))

    def queue_option(self, queue: str, option: str) -> Any:
        """One option of ``queue`` in ``QUEUES``; None where it is not set."""
        return (self.QUEUES.get(queue) or {}).get(option)

    def queue_timeout(self, queue: str) -> float | None:
        """The ``timeout`` option of ``queue``, in seconds; None if it has none."""
        timeout = (self.QUEUES.get(queue) or {}).get("timeout")
        return float(timeout) if timeout is not None else None


settings = JobsSettings()

"""New jobs: the one insert every job enters by, whatever it carries.

A driver writes the rows in one statement where its database allows
(its ``write_jobs``, :class:`JobWriter`), every column a new job has, its unique key
and concurrency key too, and wakes the workers of the queues that got a due
job when the caller's transaction commits. How a unique key is kept is the
driver's business: the statement passes over a row whose name and key a
pending or running job holds (``ON CONFLICT DO NOTHING``; ``INSERT IGNORE`` on
MariaDB and MySQL), and says which rows it wrote; :func:`insert_jobs` then
reads the live jobs that hold the keys of the others. A live job that ended
in between blocks nothing: its rows are written again.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any, NamedTuple, Protocol

from django.db import IntegrityError
from django.db.models import Q

from ..models import Job, JobStatus

#: The columns a driver's insert of new jobs writes, in the order of its values
#: (:func:`inserted_values`; the text gives the others their constant values).
INSERTED_COLUMNS = (
    "name",
    "queue",
    "payload",
    "status",
    "priority",
    "run_at",
    "attempt",
    "attempts_used",
    "max_attempts",
    "last_error",
    "progress_note",
    "created_at",
    "schedule",
    "unique_key",
    "concurrency_key",
    "concurrency_limit",
    "trace_context",
)
#: What the insert returns of each row it wrote: enough to tell which rows they are.
WRITTEN_COLUMNS = ("id", "name", "unique_key")
#: How many times rows whose key a live job held are written again, that job having ended.
TRIES = 3
#: The attribute of an unsaved job that keeps its payload as the JSON text it was checked as.
ENCODED_PAYLOAD = "_encoded_payload"


class WrittenJob(NamedTuple):
    """A row the insert wrote."""

    id: int
    name: str
    unique_key: str | None


class JobWriter(Protocol):
    """What the one insert asks of the driver: its alias, and its statement of new jobs."""

    using: str

    def write_jobs(self, rows: Sequence[Job], now: datetime) -> list[int | None]: ...


def payload_text(row: Job) -> str | None:
    """The row's payload as JSON text: as :func:`~django_jobs.scheduling.build_job` encoded
    it when it checked it (kept on the row), else encoded here."""
    text = getattr(row, ENCODED_PAYLOAD, None)
    if text is not None:
        return str(text)
    return None if row.payload is None else json.dumps(row.payload)


def copied_values(job_id: int, row: Job) -> tuple[Any, ...]:
    """A ``COPY`` row of a new job: its id, then every column of :data:`INSERTED_COLUMNS`."""
    trace = row.trace_context
    return (
        job_id,
        row.name,
        row.queue,
        payload_text(row),
        JobStatus.PENDING.value,
        row.priority,
        row.run_at,
        0,
        0,
        row.max_attempts,
        "",
        "",
        row.created_at,
        row.schedule,
        row.unique_key,
        row.concurrency_key,
        row.concurrency_limit,
        None if trace is None else json.dumps(trace),
    )


#: What PostgreSQL's ``COPY`` text format escapes in a value: the backslash, the tab
#: between the values, and the line's end.
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})
_COPY_SPECIAL = re.compile(r"[\\\t\n\r]").search


def copy_field(value: Any) -> str:
    """``value`` as a value of ``COPY``'s text format: ``\\N`` for None, a datetime in ISO
    8601 with its offset (naive, as the session's time zone reads it, as a bound one), a
    number as Python writes it, text with its backslashes, tabs and line ends escaped."""
    if value is None:
        return "\\N"
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bool):
        return "t" if value else "f"
    text = str(value)
    return text.translate(_COPY_ESCAPES) if _COPY_SPECIAL(text) else text


def copy_lines(ids: Sequence[int], rows: Sequence[Job]) -> Iterator[str]:
    """The ``COPY`` text lines of new jobs: each the values :func:`copied_values` gives,
    with its id. The values but the id and the payload are formatted once for the rows
    that share them (those of a bulk call mostly do), the payload for each row: what a
    row costs is little more than its payload, where psycopg's ``write_row`` adapts each
    of its eighteen values."""
    formatted: dict[tuple[Any, ...], tuple[str, str]] = {}
    for job_id, row in zip(ids, rows, strict=True):
        values = copied_values(job_id, row)
        shared = values[1:3] + values[4:]
        parts = formatted.get(shared)
        if parts is None:
            parts = formatted[shared] = (
                "\t".join(map(copy_field, values[1:3])),
                "\t".join(map(copy_field, values[4:])),
            )
        yield f"{job_id}\t{parts[0]}\t{copy_field(values[3])}\t{parts[1]}\n"


def inserted_values(row: Job, adapt: Callable[[datetime], Any] = lambda value: value) -> list[Any]:
    """The values an insert of new jobs binds for ``row``: the columns of
    :data:`INSERTED_COLUMNS` but its constants (status, attempt, attempts_used,
    last_error, progress_note); ``adapt`` makes a datetime the database's."""
    return [
        row.name,
        row.queue,
        payload_text(row),
        row.priority,
        adapt(row.run_at),
        row.max_attempts,
        adapt(row.created_at),
        row.schedule,
        row.unique_key,
        row.concurrency_key,
        row.concurrency_limit,
        None if row.trace_context is None else json.dumps(row.trace_context),
    ]


def written_ids(rows: Sequence[Job], written: Sequence[Sequence[Any]]) -> list[int | None]:
    """The id of each of ``rows`` in the rows an insert wrote (:data:`WRITTEN_COLUMNS`),
    None for a row it passed over. The statement writes the rows in order, so their ids
    rise in that order, and a row it passed over has a key that a live job holds."""
    found = iter(sorted(WrittenJob._make(row) for row in written))
    ids: list[int | None] = []
    next_written = next(found, None)
    for row in rows:
        if next_written is not None and (next_written.name, next_written.unique_key) == (
            row.name,
            row.unique_key,
        ):
            ids.append(next_written.id)
            next_written = next(found, None)
        else:
            ids.append(None)
    return ids


def insert_jobs(driver: JobWriter, rows: Sequence[Job], now: datetime) -> list[Job]:
    """``rows`` inserted, in order, each with its id; where a live job holds a row's key,
    that job instead (see the module's docstring)."""
    result = list(rows)
    waiting = list(range(len(rows)))
    for _ in range(TRIES):
        held = write(driver, [rows[i] for i in waiting], waiting, now)
        live = live_jobs(driver.using, [rows[i] for i in held])
        waiting = [i for i in held if (rows[i].name, rows[i].unique_key) not in live]
        for i in held:
            result[i] = live.get((rows[i].name, rows[i].unique_key), result[i])
        if not waiting:
            return result
    row = rows[waiting[0]]
    raise IntegrityError(f"job {row.name!r} with unique_key {row.unique_key!r} was not inserted")


def write(driver: JobWriter, rows: Sequence[Job], indexes: list[int], now: datetime) -> list[int]:
    """Write ``rows`` (at ``indexes``); the indexes of those passed over for their key."""
    held = []
    for row, i, job_id in zip(rows, indexes, driver.write_jobs(rows, now), strict=True):
        if job_id is not None:
            mark_saved(row, job_id, driver.using)
        elif row.unique_key is None:  # only a key a live job holds may pass a row over
            raise IntegrityError(f"job {row.name!r} was not inserted")
        else:
            held.append(i)
    return held


def mark_saved(row: Job, job_id: int, using: str) -> None:
    """``row`` as Django leaves a row it has saved."""
    row.id = job_id
    state = row._state
    state.adding = False
    state.db = using


def live_jobs(using: str, rows: Sequence[Job]) -> dict[tuple[str, str | None], Job]:
    """The pending or running job of each of ``rows``' name and unique key, where one is."""
    if not rows:
        return {}
    keys = Q()
    for row in rows:
        keys |= Q(name=row.name, unique_key=row.unique_key)
    found = Job.objects.using(using).live().filter(keys).order_by("-id")
    return {(job.name, job.unique_key): job for job in found}  # the first job wins

import re
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest

from django_jobs import ScheduleError
from django_jobs.cron import (
    next_occurrence,
    next_occurrences,
    normalise_cron,
    occurrences,
    validate_cron,
)

UTC = timezone.utc
PARIS = ZoneInfo("Europe/Paris")


@pytest.mark.parametrize(
    ("cron", "expected"),
    [
        ("0 2 * * *", "0 2 * * *"),
        ("  */5   * * * 1-5 ", "*/5 * * * 1-5"),
        ("@hourly", "0 * * * *"),
        ("@daily", "0 0 * * *"),
        ("@weekly", "0 0 * * 0"),
        ("@monthly", "0 0 1 * *"),
        ("@yearly", "0 0 1 1 *"),
        ("@MIDNIGHT", "0 0 * * *"),
    ],
)
def test_normalise_cron_five_fields_and_aliases(cron, expected):
    assert normalise_cron(cron) == expected


@pytest.mark.parametrize("cron", ["", "* * * *", "0 2 * * * *", "61 * * * *", "@often", None, 5])
def test_normalise_cron_refuses_what_is_not_a_five_field_cron(cron):
    with pytest.raises(ScheduleError):
        normalise_cron(cron)


@pytest.mark.parametrize(
    ("cron", "message"),
    [
        ("0 25 * * *", "hour '25' is out of range 0-23"),
        ("61 * * * *", "minute '61' is out of range 0-59"),
        ("0 0 0 * *", "day-of-month '0' is out of range 1-31"),
        ("0 0 * 13 *", "month '13' is out of range 1-12"),
        ("0 0 * * 8", "day-of-week '8' is out of range 0-7"),
        ("1-99 * * * *", "minute '1-99' is out of range 0-59"),
        ("*/0 * * * *", "minute '*/0' is not valid"),
        ("0 0 * jan-foo *", "month 'jan-foo' is not valid"),
    ],
)
def test_normalise_cron_names_the_field_that_is_wrong(cron, message):
    with pytest.raises(ScheduleError) as caught:
        normalise_cron(cron)
    assert str(caught.value).startswith(f"{cron!r} is not a valid cron expression: {message}")


@pytest.mark.parametrize(
    "cron", ["0 0 30 2 *", "0 0 31 4,6,9,11 *", "*/5 * 30,31 2 *", "0 0 31 2 *", "0 0 1 1 1#5"]
)
def test_validate_cron_refuses_a_cron_that_never_fires(cron):
    with pytest.raises(ScheduleError, match=f"^{re.escape(repr(cron))} never fires"):
        validate_cron(cron)


@pytest.mark.parametrize(
    ("cron", "first"),
    [
        # Day-of-month and day-of-week combine with OR: the 30th, or any Monday, of February.
        ("0 0 30 2 1", datetime(2026, 2, 2, tzinfo=UTC)),
        ("0 0 29 2 *", datetime(2028, 2, 29, tzinfo=UTC)),
        ("0 0 29 2 1#5", datetime(2044, 2, 29, tzinfo=UTC)),  # a fifth Monday in February
        ("@yearly", datetime(2027, 1, 1, tzinfo=UTC)),
    ],
)
def test_validate_cron_accepts_rare_but_real_occurrences(cron, first):
    assert validate_cron(cron) == normalise_cron(cron)
    assert next_occurrence(cron, "UTC", datetime(2026, 1, 1, tzinfo=UTC)) == first


def test_next_occurrence_of_a_cron_that_never_fires_is_a_schedule_error():
    # A row edited by hand skips validation; the scheduler still gets a JobsError.
    with pytest.raises(ScheduleError, match="'0 0 30 2 \\*' has no occurrence after"):
        next_occurrence("0 0 30 2 *", "UTC", datetime(2026, 1, 1, tzinfo=UTC))


def test_next_occurrence_unknown_time_zone():
    with pytest.raises(ScheduleError, match="unknown time zone 'Mars/Olympus'"):
        next_occurrence("@daily", "Mars/Olympus", datetime(2026, 1, 1, tzinfo=UTC))


def test_next_occurrence_is_strictly_after_and_read_in_the_zone():
    after = datetime(2026, 1, 5, 1, 0, tzinfo=UTC)  # 02:00 in Paris (CET, +1)
    assert next_occurrence("0 2 * * *", "Europe/Paris", after) == datetime(
        2026, 1, 6, 1, 0, tzinfo=UTC
    )
    assert next_occurrence("0 2 * * *", "UTC", after) == datetime(2026, 1, 5, 2, 0, tzinfo=UTC)


def local(instants):
    return [t.astimezone(PARIS).strftime("%d %H:%M%z") for t in instants]


def test_dst_forward_an_occurrence_in_the_skipped_hour_fires_once_at_the_jump():
    # 2026-03-29: Paris clocks go from 02:00 CET to 03:00 CEST.
    daily = occurrences(
        "30 2 * * *",
        "Europe/Paris",
        datetime(2026, 3, 27, tzinfo=UTC),
        datetime(2026, 3, 31, tzinfo=UTC),
    )
    assert local(daily) == ["27 02:30+0100", "28 02:30+0100", "29 03:00+0200", "30 02:30+0200"]
    halves = occurrences(
        "*/30 * * * *",
        "Europe/Paris",
        datetime(2026, 3, 29, 0, 15, tzinfo=UTC),
        datetime(2026, 3, 29, 1, 45, tzinfo=UTC),
    )
    assert local(halves) == ["29 01:30+0100", "29 03:00+0200", "29 03:30+0200"]


def test_dst_back_an_occurrence_in_the_repeated_hour_fires_once():
    # 2026-10-25: Paris clocks go from 03:00 CEST back to 02:00 CET.
    daily = occurrences(
        "30 2 * * *",
        "Europe/Paris",
        datetime(2026, 10, 24, tzinfo=UTC),
        datetime(2026, 10, 27, tzinfo=UTC),
    )
    assert local(daily) == ["24 02:30+0200", "25 02:30+0200", "26 02:30+0100"]
    halves = occurrences(
        "*/30 * * * *",
        "Europe/Paris",
        datetime(2026, 10, 24, 23, 45, tzinfo=UTC),
        datetime(2026, 10, 25, 2, 45, tzinfo=UTC),
    )
    assert local(halves) == [
        "25 02:00+0200",
        "25 02:30+0200",
        "25 03:00+0100",
        "25 03:30+0100",
    ]


def test_next_occurrence_from_inside_the_repeated_hour_does_not_go_back():
    second_passage = datetime(2026, 10, 25, 1, 10, tzinfo=UTC)  # 02:10 CET, the second time
    assert local([next_occurrence("*/15 * * * *", "Europe/Paris", second_passage)]) == [
        "25 03:00+0100"
    ]


NEW_YORK = ZoneInfo("America/New_York")


def new_york(instants):
    return [t.astimezone(NEW_YORK).strftime("%m-%d %H:%M %Z") for t in instants]


def test_next_occurrences_across_dst_forward_and_back():
    # 2026-03-08 02:00 EST jumps to 03:00 EDT; 2026-11-01 02:00 EDT falls back to 01:00 EST.
    spring = next_occurrences("30 2 * * *", "America/New_York", datetime(2026, 3, 6, tzinfo=UTC), 5)
    assert new_york(spring) == [
        "03-06 02:30 EST",
        "03-07 02:30 EST",
        "03-08 03:00 EDT",
        "03-09 02:30 EDT",
        "03-10 02:30 EDT",
    ]
    autumn = next_occurrences(
        "30 1 * * *", "America/New_York", datetime(2026, 10, 30, tzinfo=UTC), 5
    )
    assert new_york(autumn) == [
        "10-30 01:30 EDT",
        "10-31 01:30 EDT",
        "11-01 01:30 EDT",  # the repeated hour's first passage, once
        "11-02 01:30 EST",
        "11-03 01:30 EST",
    ]
    assert all(instant.tzinfo == UTC for instant in spring + autumn)


def test_next_occurrences_are_strictly_after_and_as_many_as_asked():
    after = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
    assert next_occurrences("0 * * * *", "UTC", after, 3) == [
        datetime(2026, 1, 5, hour, 0, tzinfo=UTC) for hour in (13, 14, 15)
    ]
    assert next_occurrences("0 * * * *", "UTC", after, 0) == []


@pytest.mark.parametrize(
    ("cron", "zone", "message"),
    [
        ("0 0 30 2 *", "UTC", "has no occurrence after"),
        ("every day", "UTC", "not a valid cron expression"),
        ("@daily", "Mars/Olympus", "unknown time zone"),
    ],
)
def test_next_occurrences_of_what_cannot_fire_is_a_schedule_error(cron, zone, message):
    with pytest.raises(ScheduleError, match=message):
        next_occurrences(cron, zone, datetime(2026, 1, 1, tzinfo=UTC), 5)


def test_validate_cron_refuses_one_longer_than_its_column():
    """Valid, but longer than RecurringJob.cron stores: PostgreSQL would raise a DataError."""
    minutes = ",".join(str(minute) for minute in range(60))
    long = f"{minutes} {','.join(str(hour) for hour in range(24))} * * *"
    assert len(long) > 200
    with pytest.raises(ScheduleError, match="at most 200 characters"):
        validate_cron(long)
    assert validate_cron(f"{minutes} * * * *")  # within it: valid

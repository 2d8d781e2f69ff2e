from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest

from django_jobs import ScheduleError
from django_jobs.cron import next_occurrence, normalise_cron, occurrences

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

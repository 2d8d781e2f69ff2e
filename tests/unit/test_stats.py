"""The counts the dashboard and `jobs status` share: what they call a stale heartbeat."""

from django.test import override_settings


@override_settings(DJANGO_JOBS={"LEASE_SECONDS": 30, "HEARTBEAT_SECONDS": 5})
def test_heartbeat_is_stale_after_two_missed_beats() -> None:
    from datetime import UTC, datetime, timedelta

    from django_jobs.stats import heartbeat_is_stale

    now = datetime(2026, 1, 5, 12, tzinfo=UTC)
    assert not heartbeat_is_stale(now - timedelta(seconds=10), now)
    assert heartbeat_is_stale(now - timedelta(seconds=10.5), now)

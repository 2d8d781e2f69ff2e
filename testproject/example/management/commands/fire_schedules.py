"""``manage.py fire_schedules --start ISO --minutes N``: a scheduler loop on a moved clock.

Calls ``enqueue_due`` once for each minute from ``start`` (plus 30 s) on,
without waiting for real minutes: the tests race several of these processes.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from django_jobs.recurring import enqueue_due


class Command(BaseCommand):
    help = "Run the recurring scheduler over a range of minutes, as fast as it can."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--start", required=True, type=datetime.fromisoformat)
        parser.add_argument("--minutes", required=True, type=int)

    def handle(self, *args: Any, **options: Any) -> None:
        fired = 0
        for minute in range(options["minutes"] + 1):
            now = options["start"] + timedelta(minutes=minute, seconds=30)
            fired += enqueue_due(now)
        self.stdout.write(f"fired {fired}")

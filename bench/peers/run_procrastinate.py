"""procrastinate, driven by bench/peers/common.py; runs in bench/.envs/procrastinate.

The app is bench/peers/procrastinate_app.py. The drain is ONE ``procrastinate
worker --concurrency 2 --one-shot`` (it exits once no job is left); the idle
worker is the same without ``--one-shot``, with the defaults otherwise:
LISTEN/NOTIFY on, polling every 5 seconds besides. The enqueues go through the
app's synchronous API (``defer``, ``batch_defer``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import common
import harness  # bench/harness.py, on the path once common is imported

HERE = Path(__file__).resolve().parent
APP = "procrastinate_app.app"


class Procrastinate(common.System):
    name = "procrastinate"
    workers = "1 worker, --concurrency 2"
    bulk_api = "batch_defer()"

    def __init__(self) -> None:
        sys.path.insert(0, str(HERE))
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])]
        )
        import procrastinate_app

        self.app = procrastinate_app
        self.app.app.open()
        import psycopg

        self.connection = psycopg.connect(os.environ["DATABASE_URL"], autocommit=True)

    def versions(self) -> dict[str, str]:
        return harness.package_versions("procrastinate", "psycopg")

    def prepare(self) -> None:
        self.app.app.schema_manager.apply_schema()

    def execute(self, sql: Any) -> list[tuple[Any, ...]]:
        with self.connection.cursor() as cursor:
            cursor.execute(sql)
            return cursor.fetchall() if cursor.description else []

    def delete_jobs(self) -> None:
        # The events and the periodic defers go with their jobs (ON DELETE CASCADE).
        self.execute("DELETE FROM procrastinate_jobs")

    def enqueue_one(self, number: int) -> None:
        self.app.noop.defer(number=number)

    def enqueue_many(self, numbers: range) -> None:
        self.app.noop.batch_defer(*({"number": number} for number in numbers))

    def enqueue_pickup(self, log: Path) -> None:
        self.app.record_start.defer(log=str(log))

    def worker(self, *extra: str) -> list[str]:
        command = [sys.executable, "-m", "procrastinate", "--app", APP, "worker"]
        return [*command, "--concurrency", "2", *extra]

    def drain_commands(self) -> list[list[str]]:
        return [self.worker("--one-shot")]

    def idle_commands(self) -> list[list[str]]:
        return [self.worker()]

    def counts(self) -> tuple[int, int, int]:
        rows = dict(
            self.execute("SELECT status::text, count(*) FROM procrastinate_jobs GROUP BY status")
        )
        rows.pop("todo", 0)
        succeeded = rows.pop("succeeded", 0)
        doing = rows.pop("doing", 0)
        otherwise = sum(rows.values())
        return succeeded + doing + otherwise, succeeded, otherwise

    def unfinished(self) -> bool:
        [(waiting,)] = self.execute(
            "SELECT EXISTS (SELECT 1 FROM procrastinate_jobs WHERE status IN ('todo', 'doing'))"
        )
        return bool(waiting)


if __name__ == "__main__":
    sys.exit(common.main(Procrastinate))

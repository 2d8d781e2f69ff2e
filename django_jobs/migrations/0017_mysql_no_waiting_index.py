"""On MariaDB and MySQL, which make partial indexes whole, no index of waiting jobs by queue:
the claim index leads with (status, queue) there (migration 0011) and serves the same reads,
where a whole index on the queue alone would only cost every insert. Nothing on other
databases, and nothing in the models' state."""

from typing import Any

from django.db import migrations

WAITING_INDEX = "django_jobs_waiting_idx"


def drop_on_mysql(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "mysql":
        schema_editor.execute(f"DROP INDEX {WAITING_INDEX} ON django_jobs_job")


def make_on_mysql(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "mysql":
        schema_editor.execute(f"CREATE INDEX {WAITING_INDEX} ON django_jobs_job (queue)")


class Migration(migrations.Migration):
    atomic = False  # MariaDB and MySQL commit each DDL statement on its own anyway

    dependencies = [
        ("django_jobs", "0016_workflows"),
    ]

    operations = [
        migrations.RunPython(drop_on_mysql, make_on_mysql, elidable=False),
    ]

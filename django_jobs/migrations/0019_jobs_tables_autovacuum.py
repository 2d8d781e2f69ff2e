"""PostgreSQL: the jobs tables' own autovacuum settings.

Every job leaves dead row versions behind (its claim, its end), and finished jobs stay for
their retention, so the jobs table grows while its churn stays the same. At the server's
default scale factor (0.2) autovacuum waits for a fifth of a growing table to be dead
before it cleans it; at 0.01 (and a floor of 1,000 rows) it cleans at a hundredth, and
analyzes at a fiftieth, so the claim's plans follow the table's shape. The soak benchmark
of the performance page measured both. Storage parameters only: a brief lock, no rewrite.
Other databases: nothing.
"""

from collections.abc import Iterator
from typing import Any

from django.db import migrations

SETTINGS = {
    "autovacuum_vacuum_scale_factor": "0.01",
    "autovacuum_vacuum_threshold": "1000",
    "autovacuum_vacuum_insert_scale_factor": "0.01",
    "autovacuum_analyze_scale_factor": "0.02",
}


def tables(apps: Any, schema_editor: Any) -> Iterator[str]:
    quote = schema_editor.quote_name
    for model in ("Job", "Attempt"):
        yield quote(apps.get_model("django_jobs", model)._meta.db_table)


def tune(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    values = ", ".join(f"{name} = {value}" for name, value in SETTINGS.items())
    for table in tables(apps, schema_editor):
        schema_editor.execute(f"ALTER TABLE {table} SET ({values})")


def reset(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in tables(apps, schema_editor):
        schema_editor.execute(f"ALTER TABLE {table} RESET ({', '.join(SETTINGS)})")


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobs", "0018_job_trace_context"),
    ]

    operations = [
        migrations.RunPython(tune, reset, elidable=False),
    ]

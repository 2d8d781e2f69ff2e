"""Whether someone waits for a job's end (``wait_for()``, ``await_job()``), and on
PostgreSQL a trigger that NOTIFYs the end of such a job to them.

The column is nullable: adding it rewrites no row. The trigger fires only on an update
that sets ``status``, and its condition is tested before any function is called: an end
nobody waits for sends nothing (a NOTIFY takes a lock at every commit that sent one).
Other databases: the column alone; waiters poll there.
"""

from typing import Any

from django.db import migrations, models

#: Listened to by waiters; versioned as the enqueue channel is.
END_CHANNEL = "django_jobs_end_v1"
FUNCTION = "django_jobs_notify_end"
TRIGGER = "django_jobs_notify_end"
ENDED = ("succeeded", "dead_lettered", "cancelled")


def job_table(apps: Any, schema_editor: Any) -> str:
    return schema_editor.quote_name(apps.get_model("django_jobs", "Job")._meta.db_table)


def create_trigger(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    quote = schema_editor.quote_name
    table = job_table(apps, schema_editor)
    ended = ", ".join(f"'{status}'" for status in ENDED)
    schema_editor.execute(
        f"CREATE OR REPLACE FUNCTION {quote(FUNCTION)}() RETURNS trigger LANGUAGE plpgsql AS"
        f" $$ BEGIN PERFORM pg_notify('{END_CHANNEL}', NEW.id::text); RETURN NULL; END $$"
    )
    schema_editor.execute(
        f"CREATE TRIGGER {quote(TRIGGER)} AFTER UPDATE OF status ON {table}"
        f" FOR EACH ROW WHEN (NEW.awaited AND NEW.status IN ({ended})"
        f" AND OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION {quote(FUNCTION)}()"
    )


def drop_trigger(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    quote = schema_editor.quote_name
    schema_editor.execute(
        f"DROP TRIGGER IF EXISTS {quote(TRIGGER)} ON {job_table(apps, schema_editor)}"
    )
    schema_editor.execute(f"DROP FUNCTION IF EXISTS {quote(FUNCTION)}()")


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobs", "0019_jobs_tables_autovacuum"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="awaited",
            field=models.BooleanField(
                blank=True,
                editable=False,
                help_text="Someone waits for its end (wait_for, await_job).",
                null=True,
            ),
        ),
        migrations.RunPython(create_trigger, drop_trigger, elidable=False),
    ]

"""The trace context of a job's enqueue (W3C ``traceparent``), so that its attempts' spans
follow the request that enqueued it. Nullable: adding it rewrites no row."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobs", "0017_mysql_no_waiting_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="trace_context",
            field=models.JSONField(
                blank=True,
                editable=False,
                help_text="The trace context of the span that enqueued it (W3C traceparent).",
                null=True,
            ),
        ),
    ]

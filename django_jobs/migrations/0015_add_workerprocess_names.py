"""The job names a worker process knows, on its row: which due jobs wait for a worker
that knows theirs. Nullable: the rows of workers started before it (during a rolling deploy)
say nothing, and those workers claim every name."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobs", "0014_mysql_names_compare_exactly"),
    ]

    operations = [
        migrations.AddField(
            model_name="workerprocess",
            name="names",
            field=models.JSONField(
                blank=True,
                help_text="The job names this process knows and so claims; empty for a supervisor, and for a process older than the field, which claims every name.",
                null=True,
            ),
        ),
    ]

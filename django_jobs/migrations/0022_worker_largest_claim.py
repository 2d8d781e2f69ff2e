"""The most jobs one claim of a worker process takes of a queue (``largest_claim``): on
PostgreSQL a claim under a global limit skips the queue's lock while the limit leaves every
serving process room for its largest claim (``django_jobs.db.postgresql_limits``).

Nullable, with no default in the database: a process of an older version writes its row
without the column, and a row without it keeps every claim of the queues it serves under
the lock.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobs", "0021_queue_slot_wanted"),
    ]

    operations = [
        migrations.AddField(
            model_name="workerprocess",
            name="largest_claim",
            field=models.PositiveIntegerField(
                blank=True,
                help_text=(
                    "The most jobs one claim of this process takes of a queue: the room other"
                    " processes leave it under a global limit before they claim without the"
                    " queue's lock. 0 for a process that always takes the lock; empty for one"
                    " older than the field."
                ),
                null=True,
            ),
        ),
    ]

"""Whether a worker waits for a slot of a limited queue: a claim that found the queue's
limit full marks its row, and only then does a freed slot wake the queue's workers
(``django_jobs.db.limits``). A queue whose limit never binds sends no wake-up per claim.

A column with a constant default: no row is rewritten (PostgreSQL 11 and later, and
MariaDB, add it in place; SQLite copies the queues table, a row per queue).
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobs", "0020_job_awaited"),
    ]

    operations = [
        migrations.AddField(
            model_name="queue",
            name="slot_wanted",
            field=models.BooleanField(
                default=False,
                help_text=(
                    "A claim found the queue's limit full: the next slot freed wakes its"
                    " workers."
                ),
            ),
        ),
    ]

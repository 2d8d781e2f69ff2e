"""Flow control: a row per queue (paused, its rate window), and a job's concurrency key.

On MariaDB and MySQL the queue's name and the key compare byte for byte, as job names,
queues and unique keys do (0011): "Account-1" and "account-1" are two keys.
"""

from typing import Any

from django.db import migrations, models

EXACT = "CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"


def exact_on_mysql(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "mysql":
        schema_editor.execute(
            f"ALTER TABLE django_jobs_queue MODIFY name varchar(100) {EXACT} NOT NULL"
        )
        schema_editor.execute(
            f"ALTER TABLE django_jobs_job MODIFY concurrency_key varchar(200) {EXACT} NULL"
        )


class Migration(migrations.Migration):
    atomic = False  # MariaDB and MySQL refuse the ALTER inside a transaction

    dependencies = [
        ('django_jobs', '0012_add_leader'),
    ]

    operations = [
        migrations.CreateModel(
            name='Queue',
            fields=[
                ('name', models.CharField(max_length=100, primary_key=True, serialize=False)),
                ('paused_at', models.DateTimeField(blank=True, help_text='When pause_queue() paused it; empty: it is served.', null=True)),
                ('window_start', models.DateTimeField(blank=True, help_text="The start of the rate limit's current window.", null=True)),
                ('window_count', models.PositiveIntegerField(default=0, help_text='Jobs of the queue started in that window.')),
            ],
            options={
                'verbose_name': 'queue',
                'verbose_name_plural': 'queues',
                'db_table': 'django_jobs_queue',
                'ordering': ['name'],
            },
        ),
        migrations.AddField(
            model_name='job',
            name='concurrency_key',
            field=models.CharField(blank=True, help_text='Jobs of a queue with the same key run at most concurrency_limit at once.', max_length=200, null=True),
        ),
        migrations.AddField(
            model_name='job',
            name='concurrency_limit',
            field=models.PositiveIntegerField(blank=True, help_text='How many jobs with this key may run at once.', null=True),
        ),
        migrations.AlterField(
            model_name='attempt',
            name='outcome',
            field=models.CharField(blank=True, choices=[('succeeded', 'succeeded'), ('failed', 'failed'), ('lease_expired', 'lease expired'), ('released', 'released'), ('timed_out', 'timed out'), ('cancelled', 'cancelled'), ('snoozed', 'snoozed')], max_length=20, null=True),
        ),
        migrations.RunPython(exact_on_mysql, migrations.RunPython.noop, elidable=False),
    ]

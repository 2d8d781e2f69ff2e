"""The leader lease: one row per database, which the worker processes take in turn.

On MariaDB and MySQL its name and owner compare byte for byte, as the lease owners of
jobs do (0011): a leader is told apart by its owner alone.
"""

from typing import Any

from django.db import migrations, models

EXACT = "CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"


def exact_on_mysql(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "mysql":
        schema_editor.execute(
            f"ALTER TABLE django_jobs_leader MODIFY name varchar(64) {EXACT} NOT NULL,"
            f" MODIFY owner varchar(255) {EXACT} NOT NULL"
        )


class Migration(migrations.Migration):
    atomic = False  # MariaDB and MySQL refuse the ALTER inside a transaction

    dependencies = [
        ('django_jobs', '0011_mysql_indexes_of_the_partial_ones'),
    ]

    operations = [
        migrations.CreateModel(
            name='Leader',
            fields=[
                ('name', models.CharField(max_length=64, primary_key=True, serialize=False)),
                ('owner', models.CharField(blank=True, default='', help_text='The worker process that leads.', max_length=255)),
                ('epoch', models.PositiveBigIntegerField(default=0, help_text='How many times the lease has passed to a new leader.')),
                ('elected_at', models.DateTimeField(blank=True, help_text='When this leader took the lease.', null=True)),
                ('expires_at', models.DateTimeField(blank=True, help_text='When the lease lapses unless renewed; another process may take it then.', null=True)),
            ],
            options={
                'verbose_name': 'leader',
                'verbose_name_plural': 'leaders',
                'db_table': 'django_jobs_leader',
            },
        ),
        migrations.RunPython(exact_on_mysql, migrations.RunPython.noop, elidable=False),
    ]

from django.db import migrations


class Migration(migrations.Migration):
    """``Worker`` becomes ``WorkerProcess``: a new name, the same table.

    The table is pinned to its old name first, so the rename changes no table.
    """

    dependencies = [
        ("django_jobs", "0007_add_progress_schedule_and_jobs_run"),
    ]

    operations = [
        migrations.AlterModelTable(name="worker", table="django_jobs_worker"),
        migrations.RenameModel(old_name="Worker", new_name="WorkerProcess"),
        migrations.AlterModelOptions(
            name="workerprocess",
            options={
                "ordering": ["host", "pid"],
                "verbose_name": "worker",
                "verbose_name_plural": "workers",
            },
        ),
    ]

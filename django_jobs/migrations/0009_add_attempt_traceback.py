from django.db import migrations, models


class Migration(migrations.Migration):
    """An attempt keeps its traceback beside its error line.

    The column has a database default, so the claim's ``INSERT`` of attempt rows, which does
    not name it, writes nothing more than before.
    """

    dependencies = [
        ("django_jobs", "0008_rename_worker_workerprocess"),
    ]

    operations = [
        migrations.AddField(
            model_name="attempt",
            name="traceback",
            field=models.TextField(blank=True, db_default="", default=""),
        ),
    ]

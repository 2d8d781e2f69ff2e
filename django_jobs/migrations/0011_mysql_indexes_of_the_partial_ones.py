"""On MariaDB and MySQL, what the partial indexes and the partial unique constraint give
elsewhere. Nothing on other databases, and nothing in the models' state.

Neither server has indexes with a WHERE: Django makes the partial indexes whole
(``models.W037``) and leaves the partial unique constraint out (``models.W036``). So here:

- the claim index and the lease index lead with ``status``, so that a claim or the rescuer
  reads live rows only, however many finished rows pile up;
- a live job's unique key is a virtual column, NULL unless the job is pending or running,
  with a unique index on (name, that column): at most one live job per name and key, as the
  partial constraint says on PostgreSQL and SQLite;
- the names, queues, keys and lease owners compare byte for byte (``utf8mb4_bin``), as on
  PostgreSQL and SQLite, not by a case-insensitive default collation under which
  ``"Report"`` and ``"report"`` would be one key. (A later ``AlterField`` of one of these
  columns on these servers must say its collation again.)
"""

from collections.abc import Callable
from typing import Any

from django.db import migrations

JOB = "django_jobs_job"
RECURRING = "django_jobs_recurringjob"
EXACT = "CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"

FORWARDS = [
    f"ALTER TABLE {JOB} MODIFY name varchar(200) {EXACT} NOT NULL,"
    f" MODIFY queue varchar(100) {EXACT} NOT NULL,"
    f" MODIFY unique_key varchar(255) {EXACT} NULL,"
    f" MODIFY lease_owner varchar(255) {EXACT} NULL",
    f"ALTER TABLE {RECURRING} MODIFY name varchar(200) {EXACT} NOT NULL",
    f"DROP INDEX django_jobs_claim_idx ON {JOB}",
    f"CREATE INDEX django_jobs_claim_idx ON {JOB} (status, queue, priority DESC, run_at, id)",
    f"DROP INDEX django_jobs_lease_idx ON {JOB}",
    f"CREATE INDEX django_jobs_lease_idx ON {JOB} (status, lease_expires_at)",
    f"ALTER TABLE {JOB} ADD COLUMN live_unique_key varchar(255) {EXACT} AS"
    " (CASE WHEN status IN ('pending', 'running') THEN unique_key END) VIRTUAL",
    f"CREATE UNIQUE INDEX django_jobs_unique_live_key ON {JOB} (name, live_unique_key)",
]

BACKWARDS = [
    f"DROP INDEX django_jobs_unique_live_key ON {JOB}",
    f"ALTER TABLE {JOB} DROP COLUMN live_unique_key",
    f"DROP INDEX django_jobs_lease_idx ON {JOB}",
    f"CREATE INDEX django_jobs_lease_idx ON {JOB} (lease_expires_at)",
    f"DROP INDEX django_jobs_claim_idx ON {JOB}",
    f"CREATE INDEX django_jobs_claim_idx ON {JOB} (queue, priority DESC, run_at, id)",
    # The columns keep their exact collation: case-insensitive keys could now collide.
]


def run(statements: list[str]) -> Callable[[Any, Any], None]:
    def apply(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor != "mysql":
            return
        for statement in statements:
            schema_editor.execute(statement)

    return apply


class Migration(migrations.Migration):
    atomic = False  # MariaDB and MySQL commit each DDL statement on its own anyway

    dependencies = [
        ("django_jobs", "0010_add_workerprocess_supervisor"),
    ]

    operations = [
        migrations.RunPython(run(FORWARDS), run(BACKWARDS), elidable=False),
    ]

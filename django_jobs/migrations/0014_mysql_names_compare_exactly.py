"""On MariaDB and MySQL, names, queues, keys and owners compare exactly, trailing spaces too.

``utf8mb4_bin`` (0011 to 0013) is a PAD SPACE collation: it takes ``'q'`` and ``'q '`` for
one value, so a worker of queue ``snz`` ran the jobs of ``snz ``, ``pause_queue('snz ')``
paused ``snz``, and keys that differ by trailing spaces were one key. MariaDB's
``utf8mb4_nopad_bin`` and MySQL's ``utf8mb4_0900_bin`` compare byte for byte, as PostgreSQL
and SQLite do. Nothing on other databases, and nothing in the models' state. (A later
``AlterField`` of one of these columns on these servers must say its collation again.)
"""

from typing import Any

from django.db import migrations

# table -> (column, definition without its collation)
COLUMNS = {
    "django_jobs_job": [
        ("name", "varchar(200) {exact} NOT NULL"),
        ("queue", "varchar(100) {exact} NOT NULL"),
        ("unique_key", "varchar(255) {exact} NULL"),
        ("lease_owner", "varchar(255) {exact} NULL"),
        ("concurrency_key", "varchar(200) {exact} NULL"),
        ("schedule", "varchar(200) {exact} NULL"),
        (
            "live_unique_key",
            "varchar(255) {exact} AS"
            " (CASE WHEN status IN ('pending', 'running') THEN unique_key END) VIRTUAL",
        ),
    ],
    "django_jobs_attempt": [("owner", "varchar(255) {exact} NOT NULL")],
    "django_jobs_recurringjob": [
        ("name", "varchar(200) {exact} NOT NULL"),
        ("job_name", "varchar(200) {exact} NOT NULL"),
        ("queue", "varchar(100) {exact} NULL"),
    ],
    "django_jobs_queue": [("name", "varchar(100) {exact} NOT NULL")],
    "django_jobs_leader": [
        ("name", "varchar(64) {exact} NOT NULL"),
        ("owner", "varchar(255) {exact} NOT NULL"),
    ],
}


def collation(connection: Any) -> str:
    """The server's no-pad binary collation of utf8mb4."""
    return "utf8mb4_nopad_bin" if connection.mysql_is_mariadb else "utf8mb4_0900_bin"


def alter(collate: Any) -> Any:
    def apply(apps: Any, schema_editor: Any) -> None:
        connection = schema_editor.connection
        if connection.vendor != "mysql":
            return
        exact = f"CHARACTER SET utf8mb4 COLLATE {collate(connection)}"
        for table, columns in COLUMNS.items():
            changes = ", ".join(
                f"MODIFY {column} {definition.format(exact=exact)}"
                for column, definition in columns
            )
            schema_editor.execute(f"ALTER TABLE {table} {changes}")

    return apply


class Migration(migrations.Migration):
    atomic = False  # MariaDB and MySQL refuse the ALTER inside a transaction

    dependencies = [
        ("django_jobs", "0013_flow_control"),
    ]

    operations = [
        migrations.RunPython(
            alter(collation), alter(lambda connection: "utf8mb4_bin"), elidable=False
        ),
    ]

"""Wake-ups on PostgreSQL: LISTEN/NOTIFY."""

CHANNEL = "django_jobs_v1"

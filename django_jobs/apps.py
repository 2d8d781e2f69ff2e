from __future__ import annotations

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class DjangoJobsConfig(AppConfig):
    name = "django_jobs"
    verbose_name = "Jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the system checks)

        # Import every installed app's jobs.py so that its @job handlers register.
        autodiscover_modules("jobs")

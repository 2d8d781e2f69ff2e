from importlib import import_module

from django.apps import AppConfig
from django.conf import settings


class ExampleConfig(AppConfig):
    name = "testproject.example"
    label = "example"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Import the job modules the settings add (``EXAMPLE_JOB_MODULES``): a worker of
        the next deploy knows their jobs, one of this deploy does not."""
        for module in getattr(settings, "EXAMPLE_JOB_MODULES", []):
            import_module(module)

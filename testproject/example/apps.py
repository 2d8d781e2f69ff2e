from django.apps import AppConfig


class ExampleConfig(AppConfig):
    name = "testproject.example"
    label = "example"
    default_auto_field = "django.db.models.BigAutoField"

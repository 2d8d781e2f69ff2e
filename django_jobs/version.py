"""The version of django-jobs: one place, read by the package, its traces and its metrics."""

__version__ = "0.1.0.dev0"

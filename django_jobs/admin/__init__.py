"""The admin, the operators' control room: one module per page."""

from . import dashboard as dashboard
from . import dead_letters, jobs, recurring, workers

__all__ = ["dead_letters", "jobs", "recurring", "workers"]

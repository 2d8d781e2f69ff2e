"""The admin, the operators' control room: one module per page."""

from . import dashboard as dashboard
from . import dead_letters, jobs, queues, recurring, workers

__all__ = ["dead_letters", "jobs", "queues", "recurring", "workers"]

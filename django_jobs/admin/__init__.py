"""The admin, the operators' control room: one module per page."""

from . import batches, dead_letters, jobs, queues, recurring, workers
from . import dashboard as dashboard

__all__ = ["batches", "dead_letters", "jobs", "queues", "recurring", "workers"]

from django.db import models


class Execution(models.Model):
    """A witness row per handler run, written by the ``example.record`` job."""

    job_id = models.BigIntegerField(db_index=True)
    attempt = models.PositiveIntegerField()
    pid = models.IntegerField()
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.attempt} in pid {self.pid}"

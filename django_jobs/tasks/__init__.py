"""Django's Tasks framework on django-jobs: what :class:`django_jobs.backend.JobsBackend` uses.

- :mod:`.framework`: Django's ``django.tasks`` (Django 6+) or the ``django-tasks``
  backport (Django 5.2), under one set of names;
- :mod:`.declared`: the tasks a project declares, the only paths a task's row may name;
- :mod:`.runner`: the one registered job that runs every task, and the signals;
- :mod:`.results`: a job's row as a ``TaskResult``; a task's error as stored text.
"""

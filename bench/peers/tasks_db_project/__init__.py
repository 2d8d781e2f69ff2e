"""A minimal Django project for django-tasks-db (bench/peers/run_tasks_db.py)."""

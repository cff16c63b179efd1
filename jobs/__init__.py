"""What a job is and where it goes: Celery app, queues, routing, admission and the pure policies."""

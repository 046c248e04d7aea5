"""The workers: who is alive (heartbeats), the images they hold, and handing jobs to them through Celery."""

"""Live logs: the log store (Redis streams while a job runs, files after) and the fan-out to every watcher."""

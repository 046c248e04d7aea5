"""One delivery of a job on this worker, from the Celery task to its end (above ``executors``, which
run its commands, and ``gpu``, which it holds):

    entry      the entry points: ``run_job`` (the task's) and ``recover`` (at the worker's start)
    places     a delivery's place on the host: a slot, or the reserved place of ranked runs
    job        ``JobRun``: claim, fetch, unpack, execute, ship /build, report, tidy
    unpack     the student's archive unpacked without the worker's root rights
"""

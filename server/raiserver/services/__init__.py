"""The loops every server process runs beside its requests, one file each (in the manner of
Prefect's ``services/``): ``reaper`` (leases, fences, lost deliveries, abandoned temporary files),
``release`` (the fair-share release) and ``similarity`` (staff's reports). Each pass is taken by one
process at a time, through a Redis lock (``loop_service``), whatever the number of processes."""

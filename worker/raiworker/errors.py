"""The worker's own failures, by cause, so callers catch what they mean (not ``RuntimeError`` or
``ConnectionError``, which any library may raise for reasons of its own).

A ``WorkerError`` ends the job ``error`` with its message: the student's code did not fail.
``Refused`` is the server's final no (stale attempt, finished job); ``ServerUnreachable`` is a
server that did not answer for the whole retry window (the task is retried later).
"""

from __future__ import annotations


class Refused(Exception):
    """The server said no for good (stale attempt, finished job): drop the task."""


class ServerUnreachable(Exception):
    """The server did not answer for the whole retry window."""


class NoPlace(Exception):
    """Every place on this host that the delivery may take is held (``run.places``): claim nothing, try later."""


class WorkerError(Exception):
    """Trouble on this worker, not in the job: reported to the student as the job's error."""


class ServerTrouble(WorkerError):
    """The server answered, for the whole trouble window, that it cannot take this now (its storage
    is failing: 507; busy: 503): its own words, not 'unreachable'."""


class BuildTooLarge(Exception):
    """The server will not store this build folder (413): the student's, like any build over the limits."""


class UploadTooSlow(Exception):
    """The build folder's upload went past the time it had (the job's collection allowance)."""


class ExecutorUnavailable(WorkerError):
    """The container engine is not there, or the job's image is not on this worker."""


class SlurmError(WorkerError):
    """sbatch or squeue failed: the cluster, not the student's code."""


class UnpackFailed(WorkerError):
    """The unpacking child process died for a reason other than a refused archive member."""


class NoGpu(WorkerError):
    """The job needs more GPUs than this worker has, or none became free in time."""


class ImageLoadFailed(WorkerError):
    """An image archive staff uploaded did not hold the image it was uploaded as."""

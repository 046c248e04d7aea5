"""RAI_EXECUTOR's values: each executor's name and where its class lives ("module:Class").

Only names, no imports: the settings check a name against this table without loading any executor
(a Slurm login node need not have the Docker SDK), and ``executors.executor_class`` imports the
one chosen. Adding an executor: a module in ``executors`` with an ``Executor`` subclass, and a line here.
It sits beside ``config``, not in ``executors``: config checks the name, and every executor reads config,
so inside ``executors`` the two packages would import each other.
"""

from __future__ import annotations

EXECUTORS: dict[str, str] = {
    "docker": "raiworker.executors.docker:DockerExecutor",
    "process": "raiworker.executors.process:ProcessExecutor",
    "slurm": "raiworker.executors.slurm:SlurmExecutor",
}

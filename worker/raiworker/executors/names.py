"""RAI_EXECUTOR's values: each executor's name and where its class lives ("module:Class").

Only names, no imports: ``executors.executor_class`` checks a name against this table and imports
the one chosen, and no other (a Slurm login node need not have the Docker SDK). Adding an executor: a
module in ``executors`` with an ``Executor`` subclass, and a line here.
"""

from __future__ import annotations

EXECUTORS: dict[str, str] = {
    "docker": "raiworker.executors.docker:DockerExecutor",
    "process": "raiworker.executors.process:ProcessExecutor",
    "slurm": "raiworker.executors.slurm:SlurmExecutor",
}

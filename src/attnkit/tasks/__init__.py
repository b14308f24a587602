"""The tasks a run configuration can name: translation (:mod:`.translation`) and the
classification tasks of the survey's Table 3 (one module per task; see :mod:`.base`).

:func:`job_for` gives the :class:`~attnkit.tasks.job.Job` of a configuration — the one interface
the training loop, the final evaluation and ``attnkit eval`` use for every corpus.
"""

import importlib
import pkgutil

from attnkit.config import RunConfig
from attnkit.tasks.base import Task, register_task, task_for
from attnkit.tasks.job import Job, register_job, registered_job
from attnkit.tasks.trainer import ClassificationJob

# every other module of this package registers its task (or job) on import
for _module in pkgutil.iter_modules(__path__):
    if _module.name not in ("base", "job", "trainer"):
        importlib.import_module(f"{__name__}.{_module.name}")


def job_for(config: RunConfig) -> Job:
    """The job of ``config``: the one registered for its corpus (translation), else the
    classification job of the corpus's registered :class:`Task` (``ValueError`` if none)."""
    return (registered_job(config.data.corpus) or ClassificationJob)(config)


__all__ = [
    "ClassificationJob",
    "Job",
    "Task",
    "job_for",
    "register_job",
    "register_task",
    "task_for",
]

"""The tasks a run configuration can name, one file each: translation (:mod:`.translation`) and
the classification tasks of the survey's Table 3 and of the papers' benchmarks.

Each task file defines its model sections, its data, its model and its evaluation, and
registers its class with ``@TASKS.register(corpus)`` (:data:`attnkit.config.TASKS`). This package
imports every one of them below, so importing it registers them all. :func:`job_for` gives the
:class:`~attnkit.tasks.job.Job` of a configuration — the one interface the training loop, the
final evaluation and ``attnkit eval`` use for every corpus.
"""

from attnkit.config import TASKS, RunConfig
from attnkit.tasks import (  # noqa: F401  (each registers its task)
    aspect_sentiment,
    babi,
    images,
    karate,
    memory_qa,
    movie_reviews,
    planetoid,
    rated_sentences,
    sentence_benchmarks,
    target_sentiment,
    translation,
    translation_match,
)
from attnkit.tasks.base import Task, task_for
from attnkit.tasks.job import Job
from attnkit.tasks.trainer import ClassificationJob


def job_for(config: RunConfig) -> Job:
    """The job of ``config``: the registered :class:`Job` of its corpus (translation), or the
    classification job of its registered :class:`Task`."""
    entry = TASKS.get(config.data.corpus)
    return entry(config) if issubclass(entry, Job) else ClassificationJob(config)


__all__ = [
    "TASKS",
    "ClassificationJob",
    "Job",
    "Task",
    "job_for",
    "task_for",
]

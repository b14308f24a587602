"""Classification tasks of the survey's Table 3 (one module per task; see :mod:`.base`)."""

import importlib
import pkgutil

from attnkit.tasks.base import Task, register_task, task_for

# every module of this package registers its task on import
for _module in pkgutil.iter_modules(__path__):
    if _module.name not in ("base", "trainer"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["Task", "register_task", "task_for"]

"""Tasks: Harbor / Terminal-Bench task directories (`task.py`), read by the runner and the scripted model.

from agentbake.tasks import discover_tasks, load_task

tasks = discover_tasks(["examples/tasks"])
"""

from agentbake.tasks.task import Task, discover_tasks, load_task, load_tasks

__all__ = ["Task", "discover_tasks", "load_task", "load_tasks"]

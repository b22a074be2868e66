"""The build kit: image spec -> rendered Dockerfile -> content-addressed image on a Docker engine.

>>> from agentbake.buildkit import Catalog, connect, plan, build
>>> catalog = Catalog.discover()
>>> engine = connect()
>>> result = build(engine, plan(engine, catalog.load("claude-code"), catalog.templates_dir))
>>> result.tag  # doctest: +SKIP
'agentbake/claude-code:df466684b8ef'
"""

from agentbake.buildkit.base import BaseResult, debian_base
from agentbake.buildkit.build import BuildPlan, BuildResult, build, plan
from agentbake.buildkit.builders import Builder, Progress
from agentbake.buildkit.catalog import Catalog
from agentbake.buildkit.digest import content_hash
from agentbake.buildkit.engine import connect
from agentbake.buildkit.labels import ImageLabels
from agentbake.buildkit.lock import read_lock, write_lock
from agentbake.buildkit.render import Rendered, harness_paths, render
from agentbake.buildkit.spec import ImageSpec

__all__ = [
    "BaseResult",
    "BuildPlan",
    "BuildResult",
    "Builder",
    "Catalog",
    "ImageLabels",
    "ImageSpec",
    "Progress",
    "Rendered",
    "build",
    "connect",
    "content_hash",
    "debian_base",
    "harness_paths",
    "plan",
    "read_lock",
    "render",
    "write_lock",
]

"""The build kit: image spec -> rendered Dockerfile -> content-addressed image on a Docker engine.

>>> from agentbake.buildkit import Catalog, connect, plan, build
>>> catalog = Catalog.discover()
>>> engine = connect()
>>> result = build(engine, plan(engine, catalog.load("claude-code"), catalog.templates_dir))
>>> result.tag  # doctest: +SKIP
'agentbake/claude-code:df466684b8ef'
"""

from agentbake.lazy import lazy_exports

# name -> the module defining it, imported on first use (agentbake/lazy.py): the runner's
# `agentbake.buildkit.engine` then loads no spec models, no templates' jinja2, no build machinery.
_EXPORTS = {
    "BaseResult": "agentbake.buildkit.base",
    "BuildPlan": "agentbake.buildkit.build",
    "BuildResult": "agentbake.buildkit.build",
    "Builder": "agentbake.buildkit.builders",
    "Catalog": "agentbake.buildkit.catalog",
    "ImageLabels": "agentbake.buildkit.labels",
    "ImageSpec": "agentbake.buildkit.spec",
    "Progress": "agentbake.buildkit.builders",
    "Rendered": "agentbake.buildkit.render",
    "build": "agentbake.buildkit.build",
    "connect": "agentbake.buildkit.engine",
    "content_hash": "agentbake.buildkit.digest",
    "debian_base": "agentbake.buildkit.base",
    "harness_paths": "agentbake.buildkit.render",
    "plan": "agentbake.buildkit.build",
    "read_lock": "agentbake.buildkit.lock",
    "render": "agentbake.buildkit.render",
    "write_lock": "agentbake.buildkit.lock",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)

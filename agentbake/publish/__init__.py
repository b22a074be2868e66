"""Publishing images: OCI registries, E2B templates, Hugging Face; the published manifest.

>>> from agentbake.publish import load_manifest
>>> load_manifest(Path("published.json")).resolve("claude-code").registry  # doctest: +SKIP
"""

from agentbake.publish.manifest import ImageRecord, Published, RegistryRef, load_manifest, save_manifest
from agentbake.publish.pipeline import PublishOptions, PublishResult, publish_image
from agentbake.publish.registry import Credentials, Distribution, Repository, push_image, registry_credentials

__all__ = [
    "Credentials",
    "Distribution",
    "ImageRecord",
    "PublishOptions",
    "PublishResult",
    "Published",
    "RegistryRef",
    "Repository",
    "load_manifest",
    "publish_image",
    "push_image",
    "registry_credentials",
    "save_manifest",
]

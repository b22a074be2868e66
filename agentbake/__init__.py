"""agentbake: reproducible, fast and safe sandboxes for training coding agents."""

__version__ = "0.1.0"

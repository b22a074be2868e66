"""Rollouts on a Ray cluster: `RayExecutor(RayConfig(address=...))` for `Runner(config, executor=...)`, as
`agentbake rollout --ray ADDRESS` uses it (README.md here, docs/ray.md)."""

"""The runner's model side: the upstream, its preflight, the scripted model, each rollout's gateway."""

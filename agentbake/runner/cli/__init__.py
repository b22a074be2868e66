"""`agentbake run`, `rollout` and `gc`: their options, the job `rollout` runs, and what they print."""

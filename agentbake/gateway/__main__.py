"""`python -m agentbake.gateway --upstream ...`: the `agentbake gateway` command without the rest of the CLI.

Skipping the build kit's imports (docker SDK, rich) saves a sandbox about 12 MB of resident memory.
"""

from agentbake.gateway.cli import gateway

gateway(prog_name="python -m agentbake.gateway")

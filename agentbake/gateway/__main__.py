"""`python -m agentbake.gateway --upstream ...`: the same command as `agentbake gateway`, without the rest of
agentbake's CLI, whose build-kit imports (docker SDK, rich) cost a sandbox about 12 MB of resident memory."""

from agentbake.gateway.cli import gateway

gateway(prog_name="python -m agentbake.gateway")

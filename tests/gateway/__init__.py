"""Tests of agentbake.gateway."""

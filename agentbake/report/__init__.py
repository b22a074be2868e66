"""A job directory's report: one self-contained HTML file (`agentbake report`)."""

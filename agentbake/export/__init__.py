"""Training export: each rollout's recorded calls as a token-prefix graph, exported as train-ready sequences.

from agentbake.export import export, export_rollout, export_trace, write_sequences
"""

from agentbake.export.api import (
    dumps,
    export,
    export_rollout,
    export_trace,
    summary,
    write_document,
    write_rollout_sequences,
    write_sequences,
)
from agentbake.export.findings import Finding
from agentbake.export.reader import ALL_ROLLOUTS
from agentbake.export.trl import to_trl

__all__ = [
    "ALL_ROLLOUTS",
    "Finding",
    "dumps",
    "export",
    "export_rollout",
    "export_trace",
    "summary",
    "to_trl",
    "write_document",
    "write_rollout_sequences",
    "write_sequences",
]

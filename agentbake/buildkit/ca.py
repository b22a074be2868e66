"""Extra CA certificates for builds behind an intercepting HTTPS proxy."""

from __future__ import annotations

import os
from pathlib import Path

CA_ENV_VARS = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS")


def detect_ca_bundle() -> Path | None:
    """The first CA file named by SSL_CERT_FILE, REQUESTS_CA_BUNDLE or NODE_EXTRA_CA_CERTS that exists."""
    for var in CA_ENV_VARS:
        value = os.environ.get(var)
        if value and Path(value).is_file():
            return Path(value)
    return None

"""A batch's own teardown on Ctrl-C / SIGTERM: close the runner and its backend before exiting.

What a runner killed with SIGKILL leaves, `agentbake gc` removes (`docker/gc.py`).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from typing import Protocol

logger = logging.getLogger("agentbake.runner")


class Closeable(Protocol):
    def close(self) -> None: ...


@contextlib.contextmanager
def teardown_on_signals(*closeables: Closeable) -> Iterator[None]:
    """Run a batch; on leaving the block (normally, on error, Ctrl-C or SIGTERM) close each closeable
    (`DockerBackend.close()` removes its live sandboxes and warm pool).

    SIGTERM raises SystemExit(143) in the main thread, so the block unwinds as for Ctrl-C; SIGINT raises
    KeyboardInterrupt even when the runner was started with it ignored (a background job of a script). While
    the closeables close, further SIGINT / SIGTERM are ignored: a second Ctrl-C does not leave half a teardown.
    Outside the main thread no handler can be installed and only the closing applies.
    """
    in_main = threading.current_thread() is threading.main_thread()
    previous = previous_int = None
    if in_main:

        def on_term(signum: int, frame: object) -> None:
            raise SystemExit(128 + signum)

        previous = signal.signal(signal.SIGTERM, on_term)
        previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if in_main:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            for closeable in closeables:
                try:
                    closeable.close()
                except Exception as exc:  # the others still close; gc removes what this one left
                    logger.warning("teardown: %s", exc)
        finally:
            if in_main:
                signal.signal(signal.SIGINT, previous_int)
                signal.signal(signal.SIGTERM, previous)

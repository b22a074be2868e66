"""Python source the tests run inside sandboxes (by the image's python, or a task's `python3 - <<'PY'`)."""

STILL_OPEN = """
import socket


def still_open(conns):
    # How many of `conns` the other end still holds open: a read that waits is open; EOF or an error is closed.
    count = 0
    for conn in conns:
        conn.settimeout(0.05)
        try:
            count += conn.recv(1) != b""
        except socket.timeout:
            count += 1
        except OSError:
            pass
    return count
"""

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

# The daemon attack on the race after test.sh: agent code that a root verifier imports (`python3 -c 'import helper'`
# from the workdir) prepares reward 1 in /logs/verifier and leaves a detached daemon that waits for test.sh (its
# importer's parent) to end, zombie included, then renames it over the reward.txt test.sh wrote. It polls every
# PAUSE seconds, or spins with no pause at all (0).
_WAITS_FOR_TEST_SH = """
import os, sys, time
pid, pause = int(sys.argv[1]), float(sys.argv[2])
def running():
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False
while running():
    if pause:
        time.sleep(pause)
os.rename("/logs/verifier/.forged", "/logs/verifier/reward.txt")
"""
_FORGING_HELPER = """import os, subprocess, sys
with open("/logs/verifier/.forged", "w") as forged:
    forged.write("1\\n")
subprocess.Popen([sys.executable, "-c", DAEMON, str(os.getppid()), "PAUSE"], start_new_session=True,
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print("daemon started")
"""


def forging_helper(pause: float) -> str:
    """A solve.sh writing the attack's `helper.py` into the workdir (PAUSE: see above)."""
    helper = _FORGING_HELPER.replace("DAEMON", repr(_WAITS_FOR_TEST_SH)).replace("PAUSE", str(pause))
    return f"cat > helper.py <<'PY'\n{helper}PY\n"


IMPORTS_HELPER = "python3 -c 'import helper'\necho 0 > /logs/verifier/reward.txt\n"
"""A test.sh that imports the workdir's `helper` as root (as `python3 -c` from the workdir does), then writes 0."""

"""The CrossGuard entry point: ``pulumi preview --policy-pack policies`` runs this file.

The engine starts ``pulumi-analyzer-policy-python <engine-address> .`` in this directory, which runs
``python -m pulumi.policy`` and with it this file; ``PolicyPack(...)`` then starts the Analyzer gRPC server, prints
its port on stdout for the engine to read, and blocks. The policies live in importable modules (``policies.pack``).
"""

import os
import signal
import socket
import sys
import threading
from pathlib import Path

# The pack runs as a directory script (runpy), so put the repository root on the path for ``components``/``policies``
# even where the project is not installed into the pack's virtualenv.
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from pulumi_policy import EnforcementLevel, PolicyPack

from inferplane.policies.pack import PACK_DESCRIPTION, PACK_NAME, POLICIES


def _exit_now(*_: object) -> None:
    """Exit at once: the engine asked, every answer is sent, and nothing is left to write (stdout is unbuffered)."""
    sys.stderr.flush()
    os._exit(0)


def _exit_on_sigint(wakeup: socket.socket) -> None:
    """Exit once the signal handler's wakeup byte for SIGINT arrives, whichever thread the signal interrupted."""
    while (received := wakeup.recv(64)) and signal.SIGINT not in received:
        pass
    _exit_now()


# The engine stops a pack with SIGINT, then SIGKILL after 5 s (plugin.go). Three ways to miss that: a pack launched
# from a background job (`inferplane preview ... &` in a script, a CI step, a pytest-xdist worker) inherits SIGINT
# ignored, so Python never raises KeyboardInterrupt, on which PolicyPack stops its server; where it does, the
# interpreter's ordinary exit afterwards (gRPC's threads, every module's teardown) takes 0.11 s idle here; and a
# Python handler runs only in the main thread, which PolicyPack parks in time.sleep(one day): when the kernel hands
# the process's SIGINT to one of gRPC's threads (it may when the main thread already has a signal pending), the
# sleep is never interrupted. Each was seen in loaded full test runs as the pack still there at 5 s (-9). So the pack
# handles SIGINT whatever was inherited, and the handler's C half, which runs in whichever thread took the signal,
# writes the signal's number to a wakeup socket that a thread of ours reads, and exits without the teardown.
_wakeup_read, _wakeup_write = socket.socketpair()
_wakeup_write.setblocking(False)
signal.set_wakeup_fd(_wakeup_write.fileno(), warn_on_full_buffer=False)
signal.signal(signal.SIGINT, _exit_now)
threading.Thread(target=_exit_on_sigint, args=(_wakeup_read,), name="exit-on-sigint", daemon=True).start()

PolicyPack(
    name=PACK_NAME,
    description=PACK_DESCRIPTION,
    enforcement_level=EnforcementLevel.ADVISORY,
    policies=[policy.to_sdk() for policy in POLICIES],
    provider="aws",
    tags=["inferplane", "llm-inference", "eks", "kubernetes"],
)

"""The CrossGuard entry point: ``pulumi preview --policy-pack policies`` runs this file.

The engine starts ``pulumi-analyzer-policy-python <engine-address> .`` in this directory, which runs
``python -m pulumi.policy`` and with it this file; ``PolicyPack(...)`` then starts the Analyzer gRPC server, prints
its port on stdout for the engine to read, and blocks. The policies live in importable modules (``policies.pack``).
"""

import os
import signal
import sys
from pathlib import Path

# The pack runs as a directory script (runpy), so put the repository root on the path for ``components``/``policies``
# even where the project is not installed into the pack's virtualenv.
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from pulumi_policy import EnforcementLevel, PolicyPack

from inferplane.policies.pack import PACK_DESCRIPTION, PACK_NAME, POLICIES


def _exit_now(signum: int, frame: object) -> None:
    """Exit at once: the engine asked, every answer is sent, and nothing is left to write (stdout is unbuffered)."""
    sys.stderr.flush()
    os._exit(0)


# The engine stops a pack with SIGINT, then SIGKILL after 5 s (plugin.go). Two ways to miss that: a pack launched from
# a background job (`inferplane preview ... &` in a script, a CI step, a pytest-xdist worker) inherits SIGINT ignored,
# so Python never raises KeyboardInterrupt, on which PolicyPack stops its server; and where it does, the interpreter's
# ordinary exit afterwards (gRPC's threads, every module's teardown) takes 0.11 s idle here, and twice in a loaded full
# test run the pack was still there at 5 s (-9). So the pack listens for SIGINT whatever was inherited, and exits on
# it without that teardown (0.008 s idle).
signal.signal(signal.SIGINT, _exit_now)

PolicyPack(
    name=PACK_NAME,
    description=PACK_DESCRIPTION,
    enforcement_level=EnforcementLevel.ADVISORY,
    policies=[policy.to_sdk() for policy in POLICIES],
    provider="aws",
    tags=["inferplane", "llm-inference", "eks", "kubernetes"],
)

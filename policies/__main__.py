"""The CrossGuard entry point: ``pulumi preview --policy-pack policies`` runs this file.

The engine starts ``pulumi-analyzer-policy-python <engine-address> .`` in this directory, which runs
``python -m pulumi.policy`` and with it this file; ``PolicyPack(...)`` then starts the Analyzer gRPC server, prints
its port on stdout for the engine to read, and blocks. The policies live in importable modules (``policies.pack``).
"""

import signal
import sys
from pathlib import Path

# The pack runs as a directory script (runpy), so put the repository root on the path for ``components``/``policies``
# even where the project is not installed into the pack's virtualenv.
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from pulumi_policy import EnforcementLevel, PolicyPack

from inferplane.policies.pack import PACK_DESCRIPTION, PACK_NAME, POLICIES

# The engine stops a pack with SIGINT, then SIGKILL after 5 s (plugin.go), and PolicyPack stops its server on
# KeyboardInterrupt. Python raises that only where SIGINT was not ignored when the interpreter started, and a pack
# launched from a background job (`inferplane preview ... &` in a script, a CI step, a pytest-xdist worker) inherits
# SIGINT ignored: it then never heard the engine and was killed 5 s later. Listen for SIGINT whatever was inherited.
signal.signal(signal.SIGINT, signal.default_int_handler)

PolicyPack(
    name=PACK_NAME,
    description=PACK_DESCRIPTION,
    enforcement_level=EnforcementLevel.ADVISORY,
    policies=[policy.to_sdk() for policy in POLICIES],
    provider="aws",
    tags=["inferplane", "llm-inference", "eks", "kubernetes"],
)

"""The whole platform as one component, and the composition it shares with the stack's program.

* :class:`Platform` (``inferplane:index:Platform``): the typed platform spec in, every resource of the platform
  declared as its children. The multi-language package hosts it (see :mod:`inferplane.tool.provider`).
* :func:`~inferplane.components.platform.compose.compose_platform`: the composition itself (clusters, pools,
  caches, model servers, autoscaling, monitoring), which ``infra/program.py`` runs at the top of a stack.

May import: every other component subpackage (the top layer; nothing in ``components`` imports it).
"""

from inferplane.components.platform.component import Platform

HOSTED_COMPONENTS = (Platform,)
"""The components the multi-language package hosts (their args are plain data the SDK can infer a schema from)."""

__all__ = ["HOSTED_COMPONENTS", "Platform"]

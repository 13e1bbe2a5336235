"""Imported at start by every Python process of the two NIXL-connected vLLM CPU servers of the disaggregated E2E (this
directory is on their ``PYTHONPATH``: ``tests.gateway_support.nixl_env``), never by the suite itself.

It turns off NIXL's progress thread. ``nixl_agent`` (NIXL 1.5.1, ``nixl_cu12/_api.py``) starts the thread whenever
``nixl_agent_config.enable_prog_thread`` is true, its default, which vLLM 0.32 does not override, and fixes its delay at
0 (``agent_config.pthrDelay = 0``): the thread spins on ``sched_yield``, a core per agent (measured here: 75-100 % of a
core, mostly system time, in the prefill server's worker with no request in flight). On a GPU node that is one core of
many; on this 2-core machine the two servers' threads took both cores, and each pulled request waited until the
prefill server's 30 s block lease ran out (26 of 32 requests by hand, 24-68 s each) while the first NIXL handshake ran
past vLLM's fixed 5 s. With the thread off, NIXL moves a transfer along when vLLM calls it (every engine step on both
sides, while a request's blocks are held or awaited): the same requests took 1.5-2.7 s, four transfers 52 ms in all
(2026-12-06). The transfer itself is unchanged: UCX over TCP on the loopback, NixlConnector's own code.
"""

import importlib
from typing import Any


def _quiet() -> None:
    try:
        api: Any = importlib.import_module("nixl_cu12._api")
    except ImportError:  # not the vLLM venv with NIXL: nothing to turn off
        return
    original = api.nixl_agent_config.__init__

    def without_progress_thread(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.enable_pthread = False  # what nixl_agent reads into agentConfig.useProgThread

    api.nixl_agent_config.__init__ = without_progress_thread


_quiet()

"""The ports the tests' servers listen on, and the range the tools they start pick from: each process of a run has its
own of both, so a port chosen free is still free when its server binds it a moment later."""

from __future__ import annotations

import collections
import os
import random

from inferplane.tool.gateway_run import port_is_free

_LISTEN_PORTS = range(20000, 32000)
"""Where the test servers listen: below Linux's ephemeral range (``net.ipv4.ip_local_port_range``, 32768-60999 by
default). A port the kernel hands out for ``bind(0)`` comes from that range, which every outgoing connection on the
machine also draws from, so a server started a moment later could find it taken (seen: the processor's gRPC bind
failing under a loaded parallel run)."""

_PORT_SLICES = 16
"""The range is cut into this many slices, one per process of the run: the process that configures it (the fleet)
takes the first, xdist worker ``gwN`` slice ``N + 1`` (modulo). Ports are chosen free but bound later, by the server
started with them; two processes drawing from the whole range handed out the same port (seen: a processor's metrics
port "already in use" in a full run)."""

_handed_out: collections.deque[int] = collections.deque(maxlen=128)
"""The ports this process handed out last: a port is chosen before its server binds it, so one test asking for
several (a gateway's listener, admin, processor and metrics) could otherwise be given the same one twice. Only the
last ones: a port handed out long ago is bound by now, or free again once its server stopped."""


def _slice(index: int) -> range:
    size = len(_LISTEN_PORTS) // _PORT_SLICES
    start = _LISTEN_PORTS.start + (index % _PORT_SLICES) * size
    return range(start, start + size)


def _process_index() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker[2:]) + 1 if worker.startswith("gw") and worker[2:].isdigit() else 0


def _own_ports() -> range:
    """This process's slice of :data:`_LISTEN_PORTS`."""
    return _slice(_process_index())


def tool_ports() -> str:
    """The range this process's ``inferplane gateway run`` and ``simulate`` pick their own ports from, as
    ``INFERPLANE_LOCAL_PORTS`` takes it: the slice half the range away from :func:`_own_ports` (runs of up to
    ``_PORT_SLICES / 2`` processes), so a port the tool picks free is never one a test chose and will bind in a moment,
    here or in another process (seen: a simulated gateway's processor metrics port "already in use" in a full run)."""
    ports = _slice(_process_index() + _PORT_SLICES // 2)
    return f"{ports.start}-{ports.stop - 1}"


def free_port() -> int:
    """A TCP port nothing listens on right now on any address (probed as ``inferplane gateway run`` probes:
    simulated replicas hold ports on 127.0.1.x), outside the ephemeral range, in this process's slice, and not handed
    out before by this process."""
    candidates = [port for port in _own_ports() if port not in _handed_out]
    for port in random.sample(candidates, min(200, len(candidates))):
        if port_is_free(port):
            _handed_out.append(port)
            return port
    raise RuntimeError(f"no free port in {_own_ports()}")


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive free ports (a processor's workers listen on ``port + i``)."""
    for _ in range(200):
        first = free_port()
        rest = range(first + 1, first + count)
        if all(port in _own_ports() and port not in _handed_out and port_is_free(port) for port in rest):
            _handed_out.extend(rest)
            return first
    raise RuntimeError(f"no {count} consecutive free ports in {_own_ports()}")

"""The test servers' ports (tests/ports.py): each process of a run draws from its own slice, and one process
never hands out a port twice before its server could bind it."""

from __future__ import annotations

import pytest

from tests import ports as gs


def test_each_worker_draws_from_a_slice_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    slices = {}
    for worker in ["", "gw0", "gw1", "gw2", "gw14"]:
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        slices[worker] = set(gs._own_ports())
    assert all(len(ports) == 750 for ports in slices.values())
    assert len(set().union(*slices.values())) == sum(len(ports) for ports in slices.values())  # pairwise disjoint
    assert all(set(gs._LISTEN_PORTS) >= ports for ports in slices.values())
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    assert gs.free_port() in slices.get("gw3", set(gs._own_ports()))


def test_ports_chosen_in_a_row_are_all_different(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gs, "_handed_out", type(gs._handed_out)(maxlen=gs._handed_out.maxlen))
    ports = [gs.free_port() for _ in range(100)]  # none bound meanwhile, as a gateway's ports before it starts
    first = gs.free_ports(3)
    assert len(set(ports)) == 100
    assert not {first, first + 1, first + 2} & set(ports)


def test_the_tools_range_is_apart_from_every_test_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    """``inferplane gateway run`` and ``simulate``, started by a test, pick ports free and bind them later: from a
    range no process of the run hands its test servers (INFERPLANE_LOCAL_PORTS, set by tests/conftest.py)."""
    workers = ["", *(f"gw{n}" for n in range(gs._PORT_SLICES // 2 - 1))]
    test_ports: set[int] = set()
    tool_ranges: list[range] = []
    for worker in workers:
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        test_ports |= set(gs._own_ports())
        first, last = (int(part) for part in gs.tool_ports().split("-"))
        tool_ranges.append(range(first, last + 1))
    assert all(len(ports) == 750 and not test_ports.intersection(ports) for ports in tool_ranges)
    assert len(set().union(*tool_ranges)) == 750 * len(workers)  # pairwise disjoint

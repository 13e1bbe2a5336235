"""The run's scheduling around the fleet (tests/fleet.py): which work units wait until it has settled."""

from __future__ import annotations

import pytest

from tests import fleet


@pytest.mark.parametrize(
    ("unit", "held"),
    [
        (fleet.FLEET_GROUP, True),
        (f"{fleet.AFTER_FLEET_PREFIX}gateway-cold-start", True),
        ("sglang-parser", False),
        ("tests/e2e/test_gateway_cold_start_e2e.py::test_x", False),
        (f"{fleet.FLEET_GROUP}-other", False),
    ],
)
def test_the_fleets_group_and_the_after_fleet_groups_wait(unit: str, held: bool) -> None:
    assert fleet.held_back(unit) is held


def test_the_cold_start_module_waits_for_the_fleet() -> None:
    from tests.e2e import test_gateway_cold_start_e2e as module

    groups = [mark.args[0] for mark in module.pytestmark if mark.name == "xdist_group"]
    assert groups and all(fleet.held_back(group) for group in groups)

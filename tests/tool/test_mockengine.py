"""The mock engine records what a program registers, with parents, dependencies and secrets hidden."""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from inferplane.tool.mockengine import SECRET_PLACEHOLDER, PlatformMocks, evaluate


class _Box(pulumi.ComponentResource):
    def __init__(self, name: str) -> None:
        super().__init__("inferplane:index:Box", name)
        self.role = aws.iam.Role(
            f"{name}-role",
            assume_role_policy='{"Version":"2012-10-17","Statement":[]}',
            tags={"team": "t"},
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.key = aws.kms.Key(
            f"{name}-key",
            enable_key_rotation=True,
            description=pulumi.Output.secret("hidden"),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.role], protect=True),
        )
        self.register_outputs({})


def test_records_parents_dependencies_protect_and_hides_secrets() -> None:
    def program() -> None:
        box = _Box("box")
        pulumi.export("roleArn", box.role.arn)

    result = evaluate(program, mocks=PlatformMocks(), stack="dev")

    assert [r.type for r in result.registrations] == [
        "inferplane:index:Box",
        "aws:iam/role:Role",
        "aws:kms/key:Key",
    ]
    box = result.named("box")
    role = result.named("box-role")
    key = result.named("box-key")
    assert role.parent == box.urn and key.parent == box.urn
    assert role.urn == "urn:pulumi:dev::inferplane::inferplane:index:Box$aws:iam/role:Role::box-role"
    assert key.dependencies == (role.urn,)
    assert key.protect is True and role.protect is False
    assert key.inputs["enableKeyRotation"] is True
    assert key.inputs["description"] == SECRET_PLACEHOLDER
    assert result.outputs["roleArn"] == "arn:aws:iam::123456789012:role/box-role"


def test_evaluations_do_not_leak_into_each_other() -> None:
    def one() -> None:
        _Box("one")

    def two() -> None:
        _Box("two")

    first = evaluate(one, mocks=PlatformMocks(), stack="a")
    second = evaluate(two, mocks=PlatformMocks(), stack="b")
    assert {r.name for r in first.registrations} == {"one", "one-role", "one-key"}
    assert {r.name for r in second.registrations} == {"two", "two-role", "two-key"}
    assert all(r.urn.startswith("urn:pulumi:b::") for r in second.registrations)


def test_unknown_inputs_are_recorded_apart_from_unset_ones_and_reach_the_pack_as_unknown() -> None:
    import asyncio

    from pulumi.runtime import rpc

    from inferplane.tool.analyzer import to_wire
    from inferplane.tool.mockengine import UNKNOWN_PLACEHOLDER

    def program() -> None:
        loop = asyncio.get_event_loop()
        value, known = loop.create_future(), loop.create_future()
        value.set_result(None)
        known.set_result(False)
        later: pulumi.Output[str] = pulumi.Output(set(), value, known)
        pulumi.CustomResource("test:index:Thing", "thing", {"unset": None, "later": later, "nested": {"later": later}})

    inputs = evaluate(program, mocks=PlatformMocks(), stack="dev").named("thing").inputs
    assert inputs["later"] == UNKNOWN_PLACEHOLDER
    assert inputs["nested"] == {"later": UNKNOWN_PLACEHOLDER}
    assert inputs.get("unset") is None
    # The pack gets what the engine would send during a preview: the unknown sentinel and a wrapped secret.
    assert to_wire(dict(inputs))["later"] == rpc.UNKNOWN
    assert rpc.is_rpc_secret(to_wire(SECRET_PLACEHOLDER))

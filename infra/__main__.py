"""Pulumi entry point (``main: infra/`` in Pulumi.yaml)."""

from infra.program import main

main()

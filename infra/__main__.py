"""Pulumi entry point (``main: infra/`` in Pulumi.yaml)."""

from inferplane.infra.program import main

main()

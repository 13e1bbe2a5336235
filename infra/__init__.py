"""The Pulumi program of one stack: the composition of inferplane's components (``main: infra/`` in Pulumi.yaml).

Only composition lives here; the library is :mod:`inferplane.components`, the tool that previews and checks this
program offline is :mod:`inferplane.tool`.
"""

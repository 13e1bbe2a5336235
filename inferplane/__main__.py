"""``python -m inferplane``: the Pulumi component provider (see :mod:`inferplane.tool.provider`)."""

from inferplane.tool.provider import main

main()

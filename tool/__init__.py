"""The ``inferplane`` tool: the CLI, the offline preview (mock engine, plan, diff, policy driver), preflight and
the stack-file reader. It runs the program in :mod:`inferplane.infra`; nothing in the library imports it."""

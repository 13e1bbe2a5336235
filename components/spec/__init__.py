"""What a stack asks for, and the names every part of the platform agrees on.

Owns the typed platform spec (:mod:`.platform_spec`: ``PlatformSpec``, ``parse_platform``, ``check_platform``), the
whole-stack validation the CLI runs before the program does (:mod:`.buildable`), tags and the labels derived from
them (:mod:`.tags`, :mod:`.gcp_labels`), the node labels and taints pools set and workloads match
(:mod:`.scheduling`), and how every component reports bad inputs (:mod:`.input_errors`).

May import: :mod:`inferplane.components.catalog`. Nothing here declares a resource.
"""

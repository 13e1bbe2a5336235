"""inferplane's library: typed catalogs, the platform spec, sizing, and Pulumi components.

Data flows one way: stack config -> :mod:`components.spec` -> :mod:`components.sizing` -> components ->
resources. Nothing in this package reads a stack file or talks to a cloud.
"""

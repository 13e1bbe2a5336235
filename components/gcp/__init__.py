"""The GCP foundation: the GKE cluster, its TPU v5e node pools and Memorystore for Redis.

A new GCP resource goes here. Node pools take the cluster as an input, as on AWS.

May import: :mod:`~inferplane.components.catalog`, :mod:`~inferplane.components.spec`,
:mod:`~inferplane.components.capacity`. Not :mod:`~inferplane.components.aws` (a sibling).
"""

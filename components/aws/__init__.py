"""The AWS foundation: the VPC, the EKS cluster, its GPU node groups and add-ons, ElastiCache, the S3 model cache
and their KMS keys and IAM roles.

A new AWS resource goes here, as a component of its own or a child of one of these. Node groups take the cluster as
an input, as pulumi-eks does.

May import: :mod:`~inferplane.components.catalog`, :mod:`~inferplane.components.spec`,
:mod:`~inferplane.components.capacity`. Not :mod:`~inferplane.components.gcp` (a sibling).
"""

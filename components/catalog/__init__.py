"""Catalog facts: accelerators, instance types, models, images and chart versions, EKS versions and prices, each
defined once with its source beside it. A new GPU, instance, model or pinned image goes here.

May import: nothing of inferplane (the bottom layer).
"""

from inferplane.components.catalog.accelerators import ACCELERATORS, Accelerator, AcceleratorId, get_accelerator
from inferplane.components.catalog.instances import INSTANCE_TYPES, InstanceType, get_instance_type, instances_for
from inferplane.components.catalog.models import MODELS, ModelArchitecture, get_model
from inferplane.components.catalog.prices import PRICES, PriceBook, hourly_price

__all__ = [
    "ACCELERATORS",
    "INSTANCE_TYPES",
    "MODELS",
    "PRICES",
    "Accelerator",
    "AcceleratorId",
    "InstanceType",
    "ModelArchitecture",
    "PriceBook",
    "get_accelerator",
    "get_instance_type",
    "get_model",
    "hourly_price",
    "instances_for",
]

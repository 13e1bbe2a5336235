"""Catalog facts: accelerators, instance types, models and prices, each defined once with its source."""

from components.catalog.accelerators import ACCELERATORS, Accelerator, AcceleratorId, get_accelerator
from components.catalog.instances import INSTANCE_TYPES, InstanceType, get_instance_type, instances_for
from components.catalog.models import MODELS, ModelArchitecture, get_model
from components.catalog.prices import PRICES, PriceBook, hourly_price

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

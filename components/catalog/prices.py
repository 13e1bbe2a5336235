"""The dated price book, loaded from ``prices.toml`` beside this module (the one file to refresh)."""

from __future__ import annotations

import tomllib
from importlib import resources

from pydantic import BaseModel, ConfigDict, Field

from inferplane.components.catalog.instances import Cloud


class CloudPrices(BaseModel):
    """One cloud's on-demand node prices."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    region: str = Field(description="Region the prices were read for.")
    source: str = Field(description="Where the prices come from.")
    prices: dict[str, float] = Field(description="USD per node-hour by instance or machine type.")


class PriceBook(BaseModel):
    """All prices, with the date they were read."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    as_of: str = Field(description="Date the prices were read (ISO 8601).")
    currency: str = Field(description="ISO 4217 currency of every price.")
    aws: CloudPrices
    gcp: CloudPrices


def _load() -> PriceBook:
    text = resources.files("inferplane.components.catalog").joinpath("prices.toml").read_text(encoding="utf-8")
    return PriceBook.model_validate(tomllib.loads(text))


PRICES: PriceBook = _load()


def hourly_price(cloud: Cloud, instance_type: str) -> float | None:
    """On-demand USD per node-hour, or None where no public price exists (p5e.48xlarge)."""
    book = PRICES.aws if cloud == "aws" else PRICES.gcp
    return book.prices.get(instance_type)

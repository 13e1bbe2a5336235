"""``inferplane gateway run``'s hosted providers: which of the stack's providers a local run reaches, where, with
which key and trusting which CAs.

A provider takes part only with its key given (``--provider-key NAME=FILE``): a local run never sends prompts out
on a key it was not handed. ``--provider NAME=URL`` points it elsewhere (a local HTTPS server, a test account's
endpoint), ``--provider-ca FILE`` trusts other CAs than the system's (a local server's own).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from inferplane.components.gateway.provider_renderer import SYSTEM_CA_BUNDLE
from inferplane.components.spec.platform_spec import PROVIDER_BASE_URL_PATTERN, PlatformSpec, ProviderSpec


class ProviderOptionError(ValueError):
    """A ``--provider*`` flag that cannot be honoured; the message names the flag and what is wrong."""


class LocalProviders(BaseModel):
    """The providers of a local run: the spec as the run serves it, each provider's key, the CAs trusted."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    spec: PlatformSpec = Field(description="The stack's spec with the providers left out or repointed.")
    keys: Mapping[str, str] = Field(description="Per provider taking part, its key (read from the given file).")
    ca_file: Path = Field(description="The CAs a provider's certificate must chain to.")
    left_out: tuple[str, ...] = Field(description="The stack's providers given no key: not reached by this run.")


def _pairs(flag: str, values: Sequence[str], known: Mapping[str, ProviderSpec]) -> dict[str, str]:
    """``NAME=VALUE`` flags by provider name; each name must be one of the stack's providers, given once."""
    pairs: dict[str, str] = {}
    for text in values:
        name, sep, value = text.partition("=")
        if not sep or not name or not value:
            raise ProviderOptionError(f"{flag} {text!r}: expected NAME=VALUE")
        if name not in known:
            listed = ", ".join(known) or "none"
            raise ProviderOptionError(f"{flag} {text!r}: the stack has no provider {name!r} (it has: {listed})")
        if name in pairs:
            raise ProviderOptionError(f"{flag} {name}: given twice")
        pairs[name] = value
    return pairs


def _read_key(name: str, path: str) -> str:
    try:
        key = Path(path).expanduser().read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ProviderOptionError(f"--provider-key {name}={path}: cannot read it ({exc.strerror or exc})") from None
    if not key or re.search(r"\s", key):
        raise ProviderOptionError(f"--provider-key {name}={path}: the file must hold one key, no spaces")
    return key


def local_providers(
    spec: PlatformSpec, urls: Sequence[str], key_files: Sequence[str], ca_file: str | None
) -> LocalProviders:
    """Check the ``--provider``, ``--provider-key`` and ``--provider-ca`` flags against the stack's providers."""
    known = {p.name: p for p in spec.gateway.providers}
    repointed = _pairs("--provider", urls, known)
    for name, url in repointed.items():
        if not re.match(PROVIDER_BASE_URL_PATTERN, url):
            raise ProviderOptionError(f"--provider {name}={url}: an https:// base URL with a host, no query or user")
    keys = {name: _read_key(name, path) for name, path in _pairs("--provider-key", key_files, known).items()}
    unkeyed = [name for name in repointed if name not in keys]
    if unkeyed:
        raise ProviderOptionError(f"--provider {unkeyed[0]}: give its key too (--provider-key {unkeyed[0]}=FILE)")
    trusted = Path(ca_file).expanduser() if ca_file is not None else Path(SYSTEM_CA_BUNDLE)
    if keys and not trusted.is_file():
        flag = f"--provider-ca {ca_file}" if ca_file is not None else f"the system CAs ({SYSTEM_CA_BUNDLE})"
        raise ProviderOptionError(f"{flag}: not a file; give the CAs the providers' certificates chain to")
    providers = tuple(
        p.model_copy(update={"base_url": repointed[p.name]}) if p.name in repointed else p
        for p in spec.gateway.providers
        if p.name in keys
    )
    tiers = tuple(
        t.model_copy(update={"providers": tuple(n for n in t.providers if n in keys)}) for t in spec.gateway.tiers
    )
    gateway = spec.gateway.model_copy(update={"providers": providers, "tiers": tiers})
    return LocalProviders(
        spec=spec.model_copy(update={"gateway": gateway}),
        keys=keys,
        ca_file=trusted.resolve() if keys else trusted,
        left_out=tuple(name for name in known if name not in keys),
    )

"""Hosted providers in the gateway's Envoy: one cluster per provider (DNS, TLS verified against the system CAs with
SNI, the provider's key injected from a mounted Secret), one route per provider that only the processor selects,
and the SDS file per provider that names the key's file.

Facts (Envoy 1.40.0, ``../shared/reference/providers-routing-facts.md`` §1.3, every field checked with ``envoy
--mode validate``): the credential injector is an upstream HTTP filter, so it sits in the provider cluster's
``HttpProtocolOptions.http_filters`` and a request to a platform model never carries the key; server certificates
are not verified unless ``trusted_ca`` is set (``system_root_certs`` is not implemented); ``auto_host_rewrite``
takes the Host from a DNS cluster's endpoint. Measured here on Envoy 1.40.0: a member of an aggregate cluster does
not run its own upstream filters (the aggregate's run), so a provider is reached by its own route, never as a
priority behind a model's replicas.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field

from inferplane.components.gateway.envoy_fields import duration, socket, typed
from inferplane.components.spec.platform_spec import ProviderSpec
from inferplane.processor.config import METADATA_NAMESPACE, PROVIDER_METADATA_KEY

PROVIDER_SECRETS_DIR = "/etc/inferplane/providers"
"""Where Envoy's container mounts each provider's Secret (a directory per provider); the processor's never does."""
SYSTEM_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
"""The system CAs in Envoy's official image, which providers' certificates must chain to: ``envoyproxy/envoy`` is
built on Ubuntu with ``apt-get install ca-certificates`` (envoyproxy/envoy ``ci/Dockerfile-envoy``, stage ``envoy``;
the ``distroless`` stage has no bundle, so the gateway uses the Ubuntu image)."""
CLIENT_CREDENTIAL_HEADERS = ("authorization", "x-api-key", "api-key")
"""A client's own credentials in the headers OpenAI, Anthropic and Azure use: never sent to a provider."""
FORWARDING_HEADERS = (
    "x-request-id",
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-envoy-external-address",
    "x-envoy-internal",
    "x-envoy-original-path",
    "x-envoy-decorator-operation",
)
"""What Envoy's connection manager adds about the client and the request (the router's own ``x-envoy-*`` are
suppressed; the provider E2E lists what still arrives): the provider learns nothing of the VPC's side."""
PROVIDER_CONNECT_TIMEOUT_SECONDS = 5.0
"""A TCP and TLS handshake across the internet (a replica in the VPC gets 2 s)."""
PROVIDER_RETRY_BACKOFF_SECONDS = (0.25, 2.0)
"""Base and ceiling of the back-off before the one retry at a provider (its 503s are often brief overloads)."""


class ProviderMount(BaseModel):
    """A provider's Secret as Envoy's container mounts it: the Gateway component's volume and mount."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    provider: str = Field(description="The provider's name.")
    secret: str = Field(description="Name of the Kubernetes Secret holding the key.")
    key: str = Field(description="The Secret's data key holding the key.")
    mount_dir: str = Field(description="Directory Envoy's container mounts the Secret at.")


def provider_cluster_name(provider: str) -> str:
    """The Envoy cluster of a provider (its statistics carry it as ``envoy_cluster_name``)."""
    return f"provider-{provider}"


def provider_sds_file(provider: str) -> str:
    """The SDS file naming a provider's key, mounted in the gateway's ConfigMap."""
    return f"provider-{provider}-sds.yaml"


def provider_mount(provider: ProviderSpec, secrets_dir: str = PROVIDER_SECRETS_DIR) -> ProviderMount:
    """Where ``provider``'s Secret is mounted in Envoy's container."""
    return ProviderMount(
        provider=provider.name,
        secret=provider.credential.secret,
        key=provider.credential.key,
        mount_dir=f"{secrets_dir}/{provider.name}",
    )


def provider_sds(provider: ProviderSpec, secrets_dir: str = PROVIDER_SECRETS_DIR) -> str:
    """The SDS file of ``provider``'s key: a generic secret read from the mounted Secret's file. Kubernetes replaces
    a Secret volume's files by an atomic directory swap, which the watched directory catches: a rotated key is sent
    from the next request on, without a restart."""
    mount = provider_mount(provider, secrets_dir)
    secret = {
        "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret",
        "name": provider_cluster_name(provider.name),
        "generic_secret": {
            "secret": {"filename": f"{mount.mount_dir}/{mount.key}", "watched_directory": {"path": mount.mount_dir}}
        },
    }
    return yaml.safe_dump({"resources": [secret]}, sort_keys=False)


def _endpoint(provider: ProviderSpec) -> tuple[str, int, str]:
    """Host, port and path of the provider's base URL (the spec's pattern guarantees an https URL with a host)."""
    url = urlsplit(provider.base_url)
    assert url.hostname is not None  # ProviderSpec's pattern
    return url.hostname, url.port or 443, url.path.rstrip("/")


def provider_host(provider: ProviderSpec) -> str:
    """The host the gateway reaches ``provider`` at."""
    return _endpoint(provider)[0]


def provider_port(provider: ProviderSpec) -> int:
    """The TCP port the gateway reaches ``provider`` on."""
    return _endpoint(provider)[1]


def _credential_injector(provider: ProviderSpec, config_dir: str) -> dict[str, Any]:
    """Envoy sets ``Authorization: Bearer <key>`` on every attempt to the provider, replacing what is there."""
    sds = {
        "name": provider_cluster_name(provider.name),
        "sds_config": {
            "path_config_source": {
                "path": f"{config_dir}/{provider_sds_file(provider.name)}",
                "watched_directory": {"path": config_dir},
            }
        },
    }
    return {
        "name": "envoy.filters.http.credential_injector",
        "typed_config": typed(
            "envoy.extensions.filters.http.credential_injector.v3.CredentialInjector",
            overwrite=True,
            credential={
                "name": "envoy.http.injected_credentials.generic",
                "typed_config": typed(
                    "envoy.extensions.http.injected_credentials.generic.v3.Generic",
                    credential=sds,
                    header_value_prefix="Bearer ",
                ),
            },
        ),
    }


def provider_cluster(provider: ProviderSpec, ca_file: str, config_dir: str) -> dict[str, Any]:
    """The provider's cluster: its host resolved by DNS, TLS verified against ``ca_file`` for that host (SNI and
    the certificate's DNS name), the key injected per attempt, and guards so a failing provider is ejected and a
    slow one cannot hold more than ``max_concurrency`` requests of this pod."""
    host, port, _ = _endpoint(provider)
    name = provider_cluster_name(provider.name)
    tls = typed(
        "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
        sni=host,
        common_tls_context={
            "validation_context": {
                "trusted_ca": {"filename": ca_file},
                "match_typed_subject_alt_names": [{"san_type": "DNS", "matcher": {"exact": host}}],
            }
        },
    )
    return {
        "name": name,
        "type": "LOGICAL_DNS",
        "dns_lookup_family": "V4_PREFERRED",
        "connect_timeout": duration(PROVIDER_CONNECT_TIMEOUT_SECONDS),
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [
                {
                    # ``hostname``: what auto_host_rewrite puts in the Host header.
                    "lb_endpoints": [{"endpoint": {"address": socket(host, port), "hostname": host}}]
                }
            ],
        },
        "transport_socket": {"name": "envoy.transport_sockets.tls", "typed_config": tls},
        "typed_extension_protocol_options": {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": typed(
                "envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                explicit_http_config={"http_protocol_options": {}},
                http_filters=[
                    _credential_injector(provider, config_dir),
                    {
                        "name": "envoy.filters.http.upstream_codec",
                        "typed_config": typed("envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec"),
                    },
                ],
            )
        },
        "circuit_breakers": {
            "thresholds": [
                {
                    "priority": "DEFAULT",
                    "max_connections": provider.max_concurrency,
                    "max_pending_requests": provider.max_concurrency,
                    "max_requests": provider.max_concurrency,
                    "max_retries": max(1, provider.max_concurrency // 8),
                }
            ]
        },
        # One host: a provider answering 5xx five times running (or refusing three connections) is ejected, and
        # the processor's requests for it fail fast (503) instead of waiting on it.
        "outlier_detection": {
            "consecutive_5xx": 5,
            "consecutive_gateway_failure": 3,
            "enforcing_consecutive_gateway_failure": 100,
            "interval": "5s",
            "base_ejection_time": "30s",
            "max_ejection_percent": 100,
        },
    }


def provider_route(provider: ProviderSpec, timeout_seconds: int, internal_headers: tuple[str, ...]) -> dict[str, Any]:
    """The route of requests the processor hands ``provider`` (metadata only it sets): the path under the base
    URL's, the Host the provider's, the client's credentials and the gateway's own headers removed; one retry
    after a reset, a refused connection or a 503."""
    _, _, path = _endpoint(provider)
    return {
        "name": provider_cluster_name(provider.name),
        "match": {
            "prefix": "/v1/",
            "dynamic_metadata": [
                {
                    "filter": METADATA_NAMESPACE,
                    "path": [{"key": PROVIDER_METADATA_KEY}],
                    "value": {"string_match": {"exact": provider.name}},
                }
            ],
        },
        "route": {
            "cluster": provider_cluster_name(provider.name),
            "prefix_rewrite": f"{path}/",
            "auto_host_rewrite": True,
            "timeout": duration(timeout_seconds),
            "retry_policy": {
                "retry_on": "connect-failure,reset,retriable-status-codes",
                "retriable_status_codes": [503],
                "num_retries": 1,
                "retry_back_off": {
                    "base_interval": duration(PROVIDER_RETRY_BACKOFF_SECONDS[0]),
                    "max_interval": duration(PROVIDER_RETRY_BACKOFF_SECONDS[1]),
                },
            },
        },
        "request_headers_to_remove": [*CLIENT_CREDENTIAL_HEADERS, *FORWARDING_HEADERS, *internal_headers],
    }

"""The stack's S3 model cache, bound to the ServiceAccount of every model server on the EKS cluster."""

from __future__ import annotations

from collections.abc import Mapping

import pulumi

from inferplane.components.aws.model_cache import ModelCache, ModelCacheArgs, ServiceAccountRef
from inferplane.components.catalog import get_instance_type
from inferplane.components.platform.gateway import gateway_service_account
from inferplane.components.serving import model_server as ms
from inferplane.components.serving.naming import SERVING_NAMESPACE
from inferplane.components.spec.platform_spec import PlatformSpec


def model_cache_accounts(spec: PlatformSpec) -> list[ServiceAccountRef]:
    """The ServiceAccount of every deployment on an AWS pool, in spec order; Triton's may write (engine builds).

    The names are those :func:`~inferplane.components.platform.serving.build_model_servers` gives the servers
    (``<deployment>-sa`` in :data:`~inferplane.components.serving.naming.SERVING_NAMESPACE`); GKE pools read the
    Hugging Face hub and get none.
    """
    accounts = [
        ServiceAccountRef(
            namespace=SERVING_NAMESPACE,
            name=ms.service_account_name(deployment.name),
            write=deployment.engine == "triton",
        )
        for deployment in spec.serving_deployments
        if get_instance_type(spec.pool(deployment.pool).instance_type).cloud == "aws"
    ]
    # The EKS gateway's processor reads the models' tokenizer files from the cache.
    gateway = gateway_service_account(spec)
    if gateway is not None:
        accounts.append(ServiceAccountRef(namespace=SERVING_NAMESPACE, name=gateway, write=False))
    return accounts


def build_model_cache(
    spec: PlatformSpec,
    cluster_name: pulumi.Input[str],
    tags: Mapping[str, str],
    opts: pulumi.ResourceOptions | None = None,
    *,
    parent: pulumi.Resource | None = None,
) -> ModelCache | None:
    """The model cache ``model-cache`` for the EKS cluster ``cluster_name``; ``None`` when no deployment runs on AWS.

    Pass its ``uri`` as ``model_cache_uri`` to :func:`~inferplane.components.platform.serving.build_model_servers`:
    the servers' init containers then wait for the Pod Identity associations.
    """
    accounts = model_cache_accounts(spec)
    if not accounts:
        return None
    return ModelCache(
        "model-cache",
        ModelCacheArgs(cluster_name=cluster_name, environment=spec.environment, service_accounts=accounts, tags=tags),
        pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(parent=parent)),
    )

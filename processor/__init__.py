"""inferplane's gateway processor: an Envoy external processor (ext_proc, gRPC) for what needs LLM knowledge.

Runtime code shipped in its own image (``processor/Dockerfile``), not infrastructure code: nothing here imports Pulumi
or the rest of inferplane. Its configuration (:class:`inferplane.processor.config.ProcessorConfig`) is rendered by
:mod:`inferplane.components.gateway.renderer` from the platform spec and the sizing plan.
"""

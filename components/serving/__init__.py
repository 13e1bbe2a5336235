"""The model servers: one Kubernetes workload per model deployment, every engine flag from its sizing.

Owns what all engines share (:mod:`.model_server`: placement, resources, probes, pod security, the weights' sync),
one module per engine (:mod:`.vllm_service`, :mod:`.triton_service` with :mod:`.triton_config`,
:mod:`.sglang_service`), the serving namespace's NetworkPolicy (:mod:`.network_policy`), and the contracts other parts
read back: the labels and annotations on every workload (:mod:`.annotations`) and the names and ports of the model
servers' Services (:mod:`.naming`). A new engine goes here, as ``<engine>_service.py``.

May import: :mod:`~inferplane.components.catalog`, :mod:`~inferplane.components.spec`,
:mod:`~inferplane.components.capacity`, :mod:`~inferplane.components.aws` (the model cache's layout),
:mod:`~inferplane.components.gcp`.
"""

"""``inferplane simulate``: the stack's real gateway before a simulated GPU fleet, timed from the performance model.

Owns: the timing profile a simulated engine follows (:mod:`.profile`, from
:mod:`inferplane.components.capacity.perf_model`), the model directory it loads (:mod:`.model_dir`), the fleet of
NVIDIA Dynamo mocker engines shaped like pods (:mod:`.fleet`, :mod:`.join`), the workloads (:mod:`.workload`), the
load generator (:mod:`.replay`) and the command (:mod:`.command`).

May import: the capacity model, sizing and catalogs (``components.capacity``, ``components.catalog``), the gateway's
renderer (``components.gateway``), the spec, and ``tool.gateway_run`` (the same local gateway machinery as
``inferplane gateway run``). Never the Pulumi components: nothing here provisions anything.
"""

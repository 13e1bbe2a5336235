"""The CPU of the processor's request path, by stage (:data:`inferplane.processor.metrics.CPU_STAGES`)."""

from __future__ import annotations

import time

from prometheus_client import Counter

from inferplane.processor import metrics as m


class StageClock:
    """The CPU of the request path's synchronous stages (:data:`metrics.CPU_STAGES`), summed in memory and added to
    :attr:`Metrics.stage_cpu_seconds` with the worker's total (:meth:`Processor._count_cpu`): a thread-CPU clock read
    either side of a stage costs a fraction of a microsecond, a counter update in multiprocess mode a few.

    Only code that does not await is measured: the worker runs one thread, so its CPU clock between two reads with
    no await between them is that stage's alone. What waits on Redis (budgets, slots, the cache) is left to the
    total, with the event loop and gRPC."""

    def __init__(self) -> None:
        self.spent = dict.fromkeys(m.CPU_STAGES, 0.0)
        self.read = time.thread_time

    def add(self, stage: str, started: float) -> float:
        """Add the CPU since ``started`` (a :attr:`read`) to ``stage``; returns the clock now (the next start)."""
        now = self.read()
        self.spent[stage] += now - started
        return now

    def flush(self, counter: Counter) -> None:
        """Add what was spent to ``counter`` (by stage) and start again."""
        for stage, seconds in self.spent.items():
            if seconds:
                counter.labels(stage).inc(seconds)
                self.spent[stage] = 0.0

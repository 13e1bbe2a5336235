"""How long a hostile stack file takes to be refused, against reading a good one.

Each row writes one stack file into a temporary copy of the project and runs ``inferplane size --stack`` in-process
(the validation ``preview`` and ``preflight`` share), printing the exit code, the seconds (best of ``--repeat``)
and the ratio to sizing the shipped dev stack. The issue this answers: a 519-byte file of nested aliases ran for
over a minute and a gigabyte, 20,000 nested brackets raised RecursionError. Refusals should cost about what a read
costs (ratio near 1 or below), whatever the input's size on expansion. The mutation rows time ``--examples``
random mutations of the shipped stacks (the property test's generator) and print the slowest against the same floor.

    python benchmarks/bad_inputs.py [--repeat 5] [--examples 200]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from inferplane.tool.cli import main
from inferplane.tool.stackfile import MAX_STACK_FILE_BYTES

PROJECT_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_DIR))  # the hostile inputs and the mutation generator live with the tests
from tests.test_bad_inputs import billion_laughs  # noqa: E402
from tests.test_bad_inputs_property import mutated_stack  # noqa: E402


def _dev() -> str:
    return (PROJECT_DIR / "stacks" / "Pulumi.dev.yaml").read_text()


CASES: dict[str, Callable[[], str]] = {
    "shipped dev stack (floor)": _dev,
    "nested aliases (billion laughs)": billion_laughs,
    "20,000 nested lists": lambda: "config:\n  other:unread: " + "[" * 20000 + "]" * 20000 + "\n",
    "duplicate key": lambda: _dev().replace("max_replicas: 1\n", "max_replicas: 1\n        max_replicas: 50\n"),
    "over the size limit": lambda: "# " + "x" * MAX_STACK_FILE_BYTES + "\n" + _dev(),
    "500,000 nested lists": lambda: "config:\n  other:unread: " + "[" * 500_000 + "]" * 500_000 + "\n",
    "flat list at the size limit": lambda: (
        "config:\n  other:unread: [" + "a, " * (MAX_STACK_FILE_BYTES // 3 - 20) + "a]\n"
    ),
    "min_nodes 10**400": lambda: _dev().replace("disk_gib: 150", f"disk_gib: 150\n        min_nodes: {10**400}"),
}


def _project(root: Path) -> Path:
    project = root / "project"
    (project / "stacks").mkdir(parents=True)
    shutil.copy(PROJECT_DIR / "Pulumi.yaml", project / "Pulumi.yaml")
    return project


def _run(project: Path, text: str) -> tuple[int, float]:
    (project / "stacks" / "Pulumi.bench.yaml").write_text(text, encoding="utf-8")
    sink = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        try:
            code = main(["size", "--stack", "bench", "--project-dir", str(project)])
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, time.perf_counter() - start


def _best(project: Path, text: str, repeat: int) -> tuple[int, float]:
    runs = [_run(project, text) for _ in range(repeat)]
    return runs[0][0], min(seconds for _, seconds in runs)


def _mutations(project: Path, examples: int) -> tuple[int, float, dict[int, int]]:
    from hypothesis import HealthCheck, Phase, given, settings  # noqa: PLC0415 (a test-only dependency)

    seconds: list[float] = []
    codes: dict[int, int] = {}

    @settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(case=mutated_stack())
    def run(case: tuple[str, str]) -> None:
        code, elapsed = _run(project, case[1])
        seconds.append(elapsed)
        codes[code] = codes.get(code, 0) + 1

    run()
    return len(seconds), max(seconds), codes


def main_() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--examples", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        project = _project(Path(tmp))
        _run(project, _dev())  # warm imports
        rows = {label: (make(), *_best(project, make(), args.repeat)) for label, make in CASES.items()}
        floor = rows["shipped dev stack (floor)"][2]
        print(f"{'input':34} {'bytes':>9} {'exit':>4} {'seconds':>8} {'x floor':>8}")
        for label, (text, code, seconds) in rows.items():
            print(f"{label:34} {len(text.encode()):>9} {code:>4} {seconds:>8.4f} {seconds / floor:>8.2f}")
        if args.examples:
            count, slowest, codes = _mutations(project, args.examples)
            summary = ", ".join(f"exit {code}: {n}" for code, n in sorted(codes.items()))
            print(f"{count} mutated stacks ({summary}); slowest {slowest:.4f} s = {slowest / floor:.2f} x floor")


if __name__ == "__main__":
    main_()

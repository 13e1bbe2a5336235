"""The processor's tokenization CPU a request, long texts whole against in segments, side by side in one run.

``TokenCounter.encode`` as the processor calls it, in-process, on three workloads of ``inferplane simulate``'s
generator: llm-d's prefix shape as one user message (a shared 6,144-token document and a new 256-token question: a
new text each time as a whole), the same with the document as a system message of its own, and unique 6,400-token
prompts. Each runs twice with the same 64 MiB cache a worker has, tokenizing long texts whole (as before issue 33's
segments) and in segments (:mod:`inferplane.processor.token_segments`), and the two must give the same ids. Tokenizers:
the simulated model's word-level one, and a byte-level BPE with Llama 3's split pattern trained here on the workload's
words (GPT-style, as most served models' files are). No engine, no gateway: CPU only (``time.process_time``)::

    .venv/bin/python benchmarks/tokenize_cpu.py [--requests 489]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from inferplane.processor.tokens import TokenCounter  # noqa: E402
from inferplane.tool.simulate.model_dir import build_tokenizer  # noqa: E402
from inferplane.tool.simulate.workload import WorkloadRequest, shared_prefix, unique  # noqa: E402

CACHE_BYTES = 64 << 20
"""A worker's cache (``ProcessorConfig``'s default)."""
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

Prompt = list[str]


def workloads(requests: int) -> dict[str, list[Prompt]]:
    """Each workload's prompts as the texts a chat body gives the counter."""
    rate = 8.0
    duration = requests / rate
    shared = shared_prefix(
        rate=rate, duration=duration, seed=32, groups=20, prefix_tokens=6144, question_tokens=256, output_tokens=1
    )
    one_text = [[_text(r)] for r in shared][:requests]
    split = [[" ".join(_text(r).split(" ")[:6144]), " ".join(_text(r).split(" ")[6144:])] for r in shared][:requests]
    alone = [[_text(r)] for r in unique(rate=rate, duration=duration, seed=32, prompt_tokens=6400, output_tokens=1)]
    return {
        "document + question, one message": one_text,
        "document as its own system message": split,
        "unique 6,400-token prompts": alone[:requests],
    }


def _text(request: WorkloadRequest) -> str:
    assert request.prompt is not None  # the generators above write prompts, not conversations
    return request.prompt


def byte_level(texts: list[str]) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tokenizer.train_from_iterator(
        texts, trainers.BpeTrainer(vocab_size=2000, initial_alphabet=alphabet, show_progress=False)
    )
    return tokenizer


def run(path: str, prompts: list[Prompt], segmented: bool) -> tuple[float, list[tuple[int, bool, list[int] | None]]]:
    """CPU ms a request, and every request's count and ids."""
    counter = TokenCounter({"m": path}, CACHE_BYTES)
    counter.tokenizer("m")
    counter._segmented["m"] = segmented  # the benchmark's switch: whole texts, as before segments
    started = time.process_time()
    results = [counter.encode("m", texts, len(texts), 0) for texts in prompts]
    return (time.process_time() - started) / len(prompts) * 1000, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=489, help="requests a workload (489: 60 s at 8 req/s)")
    args = parser.parse_args()
    loads = workloads(args.requests)
    corpus = [texts[0] for texts in loads["document + question, one message"][:40]]
    builders: dict[str, Callable[[], Tokenizer]] = {
        "word level (the simulated model's)": build_tokenizer,
        "byte-level BPE, Llama 3's split": lambda: byte_level(corpus),
    }
    with tempfile.TemporaryDirectory() as directory:
        print(f"{'tokenizer':36} {'workload':38} {'whole ms':>9} {'segments ms':>12}")
        for name, build in builders.items():
            path = str(Path(directory) / f"{len(name)}.json")
            build().save(path)
            for workload, prompts in loads.items():
                whole_ms, whole = run(path, prompts, False)
                cut_ms, cut = run(path, prompts, True)
                if whole != cut:
                    raise SystemExit(f"{name}, {workload}: the segments' ids differ from the whole texts'")
                print(f"{name:36} {workload:38} {whole_ms:9.2f} {cut_ms:12.2f}")


if __name__ == "__main__":
    main()

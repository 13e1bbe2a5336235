"""The documentation holds together: README.md and every page under docs/.

* every relative link resolves to a file or folder of the repository, and an anchor into a Markdown file names one of
  its headings (GitHub's slugs);
* every ``inferplane`` command a code block shows parses with the real argument parser, and every option an inline
  ``inferplane ...`` names exists on that subcommand;
* every ``make`` target a doc shows is a target of the Makefile;
* every repository path (``components/serving/vllm_service.py``) and module name (``inferplane.processor.config``)
  in inline code exists;
* README.md stays short, and every page of docs/ is linked from README.md or docs/README.md.

Each checker is a function of a root folder, so the tests at the bottom can prove on a scratch tree that it finds
what it looks for (none of them can pass by finding nothing).
"""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from inferplane.tool.cli import build_parser

PROJECT_DIR = Path(__file__).resolve().parent.parent
README_MAX_LINES = 250
GENERATED_PATHS = (".ci/cache", ".venv")
"""Folders the docs name that a build creates (``make references``, ``make install``), absent in a fresh clone."""
PACKAGE_FOLDERS = ("components", "infra", "policies", "processor", "tool")
"""The folders ``inferplane/`` links: ``inferplane.<folder>.<module>`` is ``<folder>/<module>.py``."""
NOT_MODULES = frozenset({"inferplane.cache_result"})
"""Dotted names the docs show that are not Python (``inferplane.cache_result``: an Envoy dynamic-metadata namespace)."""

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([\w+-]*)")
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)
_LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_LINK_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$", re.MULTILINE)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_HTML_ANCHOR = re.compile(r"<a\s[^>]*\b(?:name|id)=\"([^\"]+)\"")
_COMMAND = re.compile(r"(?:^|&&|\|\||;|\|)\s*(?:\$\s+)?(?:\S*/)?(?:inferplane|make)(?:\s|$)")
_INLINE_COMMAND = re.compile(r"^(?:\$\s+)?(?:\S*/)?inferplane\s")
_DOTTED = re.compile(r"(?<![\w./:-])((?:inferplane|components)(?:\.[A-Za-z_]\w*)+)(?![\w/-])")
_FROM_IMPORT = re.compile(r"^from\s+((?:inferplane|components)(?:\.\w+)*)\s+import\s+([\w\s,]+)$")
_REPO_PATH = re.compile(r"^\.?[\w.-]+(?:/[\w.-]+)+/?$")
_MAKE_TARGET = re.compile(r"^([A-Za-z0-9_.-]+(?:[ \t]+[A-Za-z0-9_.-]+)*)[ \t]*:(?!=)", re.MULTILINE)
_SHELL_SEPARATORS = frozenset({"&&", "||", ";", "|"})
SHELL_LANGUAGES = frozenset({"", "sh", "bash", "shell", "console", "zsh", "text"})
"""The info strings of code blocks whose lines are read as commands (not ``yaml``, ``python``, ``typescript``...)."""


@dataclass(frozen=True)
class Block:
    """A fenced code block: its info string, first content line (1-based) and lines."""

    language: str
    line: int
    lines: tuple[str, ...]


@dataclass(frozen=True)
class Span:
    """An inline code span outside fenced blocks, with the line it starts on."""

    line: int
    text: str


@dataclass(frozen=True)
class Doc:
    """One Markdown file, split into what the checkers read."""

    path: Path
    text: str
    blocks: tuple[Block, ...]
    prose: str
    """The text with fenced blocks blanked and code spans masked (line numbers kept), where links are looked for."""
    spans: tuple[Span, ...]
    headings: tuple[str, ...]

    def where(self, line: int, root: Path) -> str:
        return f"{self.path.relative_to(root)}:{line}"


def parse_doc(path: Path) -> Doc:
    """Split a Markdown file into fenced blocks, inline code spans, headings and the prose between them."""
    text = path.read_text(encoding="utf-8")
    blocks: list[Block] = []
    outside: list[str] = []
    headings: list[str] = []
    fence: str | None = None
    language = ""
    start = 0
    body: list[str] = []
    for number, line in enumerate(text.split("\n"), start=1):
        match = _FENCE.match(line)
        if fence is None:
            if match:
                fence, language, start, body = match.group(1), match.group(2), number + 1, []
                outside.append("")
                continue
            heading = _HEADING.match(line)
            if heading:
                headings.append(heading.group(2))
            outside.append(line)
        elif match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence) and not match.group(2):
            blocks.append(Block(language, start, tuple(body)))
            fence = None
            outside.append("")
        else:
            body.append(line)
            outside.append("")
    assert fence is None, f"{path}: a fenced code block opened on line {start - 1} is never closed"
    spans: list[Span] = []
    prose = "\n".join(outside)
    masked = list(prose)
    for paragraph in re.finditer(r"(?:[^\n]+\n?)+", prose):  # code spans never cross a blank line
        for span in _CODE_SPAN.finditer(paragraph.group(0)):
            begin = paragraph.start() + span.start()
            spans.append(Span(prose.count("\n", 0, begin) + 1, " ".join(span.group(2).split())))
            for index in range(begin, paragraph.start() + span.end()):
                if masked[index] != "\n":
                    masked[index] = " "
    return Doc(path, text, tuple(blocks), "".join(masked), tuple(spans), tuple(headings))


def doc_paths(root: Path) -> list[Path]:
    """README.md and every Markdown file under docs/."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def docs(root: Path) -> list[Doc]:
    return [parse_doc(path) for path in doc_paths(root)]


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text lower-cased, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text, not its target
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(doc: Doc) -> set[str]:
    """Every anchor a link into this file may name (repeated headings get -1, -2, ... as on GitHub)."""
    found: set[str] = set(_HTML_ANCHOR.findall(doc.text))
    seen: dict[str, int] = {}
    for heading in doc.headings:
        slug = github_slug(heading)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def links(doc: Doc) -> Iterator[tuple[int, str]]:
    """(line, target) of every inline link, image and link definition outside code."""
    for pattern in (_LINK, _LINK_DEFINITION):
        for match in pattern.finditer(doc.prose):
            yield doc.prose.count("\n", 0, match.start()) + 1, match.group(1)


def link_problems(root: Path) -> list[str]:
    """Every relative link that does not resolve inside the repository, or names an anchor its target lacks."""
    parsed = {doc.path: doc for doc in docs(root)}
    problems: list[str] = []
    for doc in parsed.values():
        for line, target in links(doc):
            if _SCHEME.match(target):
                continue  # http(s), mailto: not this test's business
            path_part, _, anchor = target.partition("#")
            if path_part.startswith("/"):
                resolved = root / unquote(path_part).lstrip("/")
            else:
                resolved = (doc.path.parent / unquote(path_part)).resolve() if path_part else doc.path
            if not resolved.resolve().is_relative_to(root.resolve()):
                problems.append(f"{doc.where(line, root)}: {target} points outside the repository")
                continue
            if not resolved.exists():
                problems.append(f"{doc.where(line, root)}: {target} does not exist")
                continue
            if anchor and resolved.suffix == ".md":
                into = parsed.get(resolved) or parse_doc(resolved)
                if anchor not in anchors(into):
                    problems.append(f"{doc.where(line, root)}: {target}: no heading of {resolved.name} has this anchor")
    return problems


def shell_commands(block: Block) -> Iterator[tuple[int, list[str]]]:
    """(line, argv) of every ``inferplane`` or ``make`` command in a code block, continuation lines joined; an empty
    argv for such a line the shell cannot split.

    In a block with prompts (``$ ``) only the prompted lines are commands; the rest is their output.
    """
    if block.language.lower() not in SHELL_LANGUAGES:
        return
    prompted = any(line.lstrip().startswith("$ ") for line in block.lines)
    index = 0
    while index < len(block.lines):
        start = index
        logical = block.lines[index].strip()
        while logical.endswith("\\") and index + 1 < len(block.lines):
            index += 1
            logical = logical[:-1] + " " + block.lines[index].strip()
        index += 1
        if prompted and not logical.startswith("$ "):
            continue
        if not _COMMAND.search(logical):
            continue
        try:
            tokens = shlex.split(logical.removeprefix("$ "), comments=True)
        except ValueError:  # an unclosed quote: a line nobody can paste
            yield block.line + start, []
            continue
        command: list[str] = []
        for token in [*tokens, ";"]:
            if token in _SHELL_SEPARATORS:
                if command and Path(command[0]).name in ("inferplane", "make"):
                    yield block.line + start, command
                command = []
            else:
                command.append(token)


def parse_error(parser: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """What argparse says about ``argv`` (without the program name), or None when it parses."""
    messages: list[str] = []

    def refuse(message: str) -> None:
        messages.append(message)
        raise SystemExit(2)

    def patch(each: argparse.ArgumentParser) -> None:
        each.error = refuse  # type: ignore[method-assign,assignment]
        for sub in subparsers(each).values():
            patch(sub)

    patch(parser)
    try:
        parser.parse_args(argv)
    except SystemExit as exc:
        return messages[0] if messages else f"exit {exc.code}"
    return None


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def makefile_targets(root: Path) -> set[str]:
    makefile = root / "Makefile"
    if not makefile.exists():
        return set()
    return {name for match in _MAKE_TARGET.finditer(makefile.read_text()) for name in match.group(1).split()}


def command_problems(root: Path, parser: argparse.ArgumentParser) -> tuple[list[str], int]:
    """Every code-block ``inferplane`` command argparse refuses and every ``make`` target the Makefile lacks, and how
    many commands were checked."""
    targets = makefile_targets(root)
    problems: list[str] = []
    checked = 0
    for doc in docs(root):
        for block in doc.blocks:
            for line, argv in shell_commands(block):
                checked += 1
                if not argv:
                    problems.append(f"{doc.where(line, root)}: a command line the shell cannot split (a quote?)")
                    continue
                shown = shlex.join(argv)
                if Path(argv[0]).name == "make":
                    missing = [a for a in argv[1:] if not a.startswith("-") and "=" not in a and a not in targets]
                    if missing:
                        problems.append(f"{doc.where(line, root)}: `{shown}`: no Makefile target {missing}")
                    continue
                error = parse_error(parser, argv[1:])
                if error is not None:
                    problems.append(f"{doc.where(line, root)}: `{shown}` does not parse: {error}")
        for span in doc.spans:
            words = span.text.removeprefix("$ ").split()
            if words[:1] == ["make"]:
                checked += 1
                missing = [w for w in words[1:] if not w.startswith("-") and "=" not in w and w not in targets]
                if missing:
                    problems.append(f"{doc.where(span.line, root)}: `{span.text}`: no Makefile target {missing}")
            elif _INLINE_COMMAND.match(span.text):
                checked += 1
                problems.extend(
                    f"{doc.where(span.line, root)}: `{span.text}`: {p}" for p in option_problems(parser, words)
                )
    return problems, checked


def option_problems(parser: argparse.ArgumentParser, words: list[str]) -> list[str]:
    """For an inline synopsis (``inferplane cache eval [--pairs FILE] [--json]``, ``inferplane plan --top N``): the
    subcommands must exist and every option must be one of the subcommand's. Required arguments are not asked for: an
    inline mention names options, it need not be a whole command."""
    current = parser
    path = ["inferplane"]
    tokens = [word.strip("[](),.;") for word in words[1:]]
    for token in tokens:
        choices = subparsers(current)
        if not choices or token.startswith("-"):
            break
        if token not in choices:
            return [f"{' '.join(path)} has no subcommand {token!r} (it has {sorted(choices)})"]
        current = choices[token]
        path.append(token)
    known = {option for action in current._actions for option in action.option_strings}
    return [
        f"{' '.join(path)} has no option {option}"
        for option in (token.split("=")[0] for token in tokens if token.startswith("--"))
        if option not in known
    ]


def defines(source: str, name: str) -> bool:
    """Whether a module's source defines or imports ``name`` (or lists it as a lazily loaded export)."""
    escaped = re.escape(name)
    patterns = (
        rf"^\s*(?:async\s+def|def|class)\s+{escaped}\b",
        rf"^\s*{escaped}\s*(?::|=)",
        rf"^\s*(?:from\s+\S+\s+)?import\s[^\n]*\b{escaped}\b",
        rf"^\s+{escaped},?\s*$",  # a parenthesised import list
        rf"[\"']{escaped}[\"']",
    )
    return any(re.search(pattern, source, re.MULTILINE) for pattern in patterns)


def module_problem(root: Path, dotted: str) -> str | None:
    """Why ``inferplane.a.b.name`` (or ``components.a.b``) does not name a module of the repository or a name one
    defines; None when it does."""
    if dotted in NOT_MODULES:
        return None
    parts = dotted.split(".")
    if parts[0] == "components":
        parts = ["inferplane", *parts]
    if len(parts) < 2 or parts[1] == "io":  # inferplane.io/...: a label domain
        return None
    folder = root / parts[1]
    if parts[1] not in PACKAGE_FOLDERS or not folder.is_dir():
        return f"inferplane.{parts[1]} is not one of the packages ({', '.join(PACKAGE_FOLDERS)})"
    module = folder / "__init__.py"
    consumed = 2
    for index in range(2, len(parts)):
        candidate = folder.joinpath(*parts[2 : index + 1])
        if (candidate / "__init__.py").exists():
            module, consumed = candidate / "__init__.py", index + 1
        elif candidate.with_suffix(".py").exists():
            module, consumed = candidate.with_suffix(".py"), index + 1
            break
        else:
            break
    if consumed == len(parts):
        return None
    name = parts[consumed]
    if module.exists() and defines(module.read_text(encoding="utf-8"), name):
        return None
    shown = ".".join(parts[:consumed])
    return f"{shown} has no module or name {name!r} ({module.relative_to(root)})"


def reference_problems(root: Path) -> tuple[list[str], int]:
    """Every repository path and module name in inline code that does not exist, and how many were checked.

    A path is a word of a code span whose first folder is a folder of the repository (``python benchmarks/x.py``,
    ``components/spec/buildable.py:validate_platform``); placeholders (``stacks/Pulumi.<stack>.yaml``) are not paths.
    """
    folders = {entry.name for entry in root.iterdir() if entry.is_dir()}
    problems: list[str] = []
    checked = 0
    for doc in docs(root):
        for span in doc.spans:
            for word in span.text.split():
                path = word.strip("[](),;").split(":")[0]
                if not _REPO_PATH.match(path) or path.split("/")[0] not in folders:
                    continue
                if any(path.startswith(generated) for generated in GENERATED_PATHS):
                    continue
                checked += 1
                if not (root / path).exists():
                    problems.append(f"{doc.where(span.line, root)}: `{span.text}`: {path} does not exist")
            imported = _FROM_IMPORT.match(span.text)
            names = (
                [f"{imported.group(1)}.{n.strip()}" for n in imported.group(2).split(",") if n.strip()]
                if imported
                else []
            )
            for dotted in names or [match.group(1) for match in _DOTTED.finditer(span.text)]:
                checked += 1
                problem = module_problem(root, dotted)
                if problem:
                    problems.append(f"{doc.where(span.line, root)}: `{span.text}`: {problem}")
    return problems, checked


def readme_problem(root: Path) -> str | None:
    """Why README.md is too long for a front page, or None."""
    lines = (root / "README.md").read_text(encoding="utf-8").count("\n")
    if lines <= README_MAX_LINES:
        return None
    return f"README.md has {lines} lines, more than {README_MAX_LINES}: move reference material into docs/"


def unlinked_pages(root: Path) -> list[str]:
    """Pages under docs/ that neither README.md nor docs/README.md links to."""
    indexes = [root / "README.md", root / "docs" / "README.md"]
    reached: set[Path] = set()
    for index in indexes:
        if not index.exists():
            continue
        doc = parse_doc(index)
        for _line, target in links(doc):
            path_part = target.partition("#")[0]
            if path_part and not _SCHEME.match(target):
                reached.add((index.parent / unquote(path_part)).resolve())
    return [
        str(path.relative_to(root))
        for path in sorted((root / "docs").rglob("*.md"))
        if path.resolve() not in reached and path.resolve() != indexes[1].resolve()
    ] + ([] if (root / "docs" / "README.md").resolve() in reached else ["docs/README.md (from README.md)"])


# The repository's own docs.


def test_every_relative_link_resolves() -> None:
    assert sum(1 for doc in docs(PROJECT_DIR) for _ in links(doc)) >= 30  # the checker sees the links
    assert link_problems(PROJECT_DIR) == []


def test_every_command_shown_parses() -> None:
    problems, checked = command_problems(PROJECT_DIR, build_parser())
    assert checked >= 20
    assert problems == []


def test_every_path_and_module_named_exists() -> None:
    problems, checked = reference_problems(PROJECT_DIR)
    assert checked >= 100
    assert problems == []


def test_the_readme_is_short() -> None:
    assert readme_problem(PROJECT_DIR) is None


def test_every_page_is_linked_from_an_index() -> None:
    assert len(doc_paths(PROJECT_DIR)) >= 10
    assert unlinked_pages(PROJECT_DIR) == []


# Each checker finds what it looks for.


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_a_broken_link_and_a_bad_anchor_are_found(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {
            "README.md": "# Project\n\nSee [the gateway](docs/gateway.md#the-processor) and [spec](docs/spec.md).\n"
            "[up](../outside.md), [web](https://example.com/x), `[not a link](nowhere.md)`\n",
            "docs/gateway.md": "# Gateway\n\n## The processor (`inferplane.processor`)\n\n[back](../README.md#nope)\n"
            "[self](#gateway) [code](../README.md)\n\n```sh\n# a comment, not a heading\n```\n"
            "[x](#a-comment-not-a-heading)\n",
        },
    )
    assert link_problems(root) == [
        "README.md:3: docs/gateway.md#the-processor: no heading of gateway.md has this anchor",
        "README.md:3: docs/spec.md does not exist",
        "README.md:4: ../outside.md points outside the repository",
        "docs/gateway.md:5: ../README.md#nope: no heading of README.md has this anchor",
        "docs/gateway.md:11: #a-comment-not-a-heading: no heading of gateway.md has this anchor",
    ]
    assert github_slug("The processor (`inferplane.processor`)") == "the-processor-inferplaneprocessor"
    assert github_slug("Preflight: checking the AWS account before `pulumi up`") == (
        "preflight-checking-the-aws-account-before-pulumi-up"
    )


def test_an_unknown_flag_a_bad_value_and_a_missing_target_are_found(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {
            "Makefile": "preview: install\n\t@true\ntest lint:\n\t@true\nSTACK ?= dev\n",
            "README.md": "# Project\n\n```sh\nmake preview STACK=prod   # fine\nmake deploy\n"
            "inferplane preview --stack dev\n.venv/bin/inferplane size --model llama-3.1-8b \\\n"
            "    --accelerator h100-80gb --no-such-flag\ninferplane plan --top 3   # required flags missing\n"
            "cd x && inferplane size --gpus two\n```\n\n"
            "```console\n$ inferplane size --stack prod\ninferplane size: output, not a command --bogus\n```\n"
            "```python\nmake deploy  # not a shell block\n```\n"
            "Inline: `inferplane cache eval [--pairs FILE] [--json]`, `inferplane plan --write-stack S`, "
            "`inferplane preview --bogus`, `inferplane deploy`, `make lint`, `make release`.\n",
        },
    )
    problems, checked = command_problems(root, build_parser())
    assert checked == 13
    assert [p.split(" does not parse: ")[0] if "parse" in p else p for p in problems] == [
        "README.md:5: `make deploy`: no Makefile target ['deploy']",
        "README.md:7: `.venv/bin/inferplane size --model llama-3.1-8b --accelerator h100-80gb --no-such-flag`",
        "README.md:9: `inferplane plan --top 3`",
        "README.md:10: `inferplane size --gpus two`",
        "README.md:20: `inferplane preview --bogus`: inferplane preview has no option --bogus",
        "README.md:20: `inferplane deploy`: inferplane has no subcommand 'deploy' (it has "
        "['cache', 'gateway', 'plan', 'preflight', 'preview', 'route', 'schema', 'simulate', 'size'])",
        "README.md:20: `make release`: no Makefile target ['release']",
    ]
    assert "unrecognized arguments: --no-such-flag" in problems[1]
    assert "required" in problems[2]
    assert "'two' is not an integer" in problems[3]


def test_a_missing_path_and_a_stale_module_are_found(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {
            "components/serving/__init__.py": "",
            "components/serving/vllm_service.py": "class VllmService:\n    pass\n",
            "components/__init__.py": '_EXPORTS = {"VllmService": "serving.vllm_service"}\n',
            "processor/config.py": "from x import (\n    Thing,\n)\nPORT: int = 1\n",
            "tool/cli.py": "",
            "README.md": "# Project\n\n`components/serving/vllm_service.py`, `components/spec.py`, "
            "`components/serving/`, `.ci/cache/envoy`, `../shared/x`, `tool/stackfile.py:load`,\n"
            "`inferplane.processor.config.PORT`, `inferplane.processor.config.Thing`, `inferplane.gateway.server`,\n"
            "`components.serving.vllm_service.VllmService`, `components.sizing`, `inferplane.io/pool`,\n"
            "`from inferplane.components import VllmService, Gone`, `python -m inferplane.processor.nothing`,\n"
            "`inferplane.processor.config.Missing`\n",
        },
    )
    problems, checked = reference_problems(root)
    assert checked == 13
    assert problems == [
        "README.md:3: `components/spec.py`: components/spec.py does not exist",
        "README.md:3: `tool/stackfile.py:load`: tool/stackfile.py does not exist",
        "README.md:4: `inferplane.gateway.server`: inferplane.gateway is not one of the packages "
        "(components, infra, policies, processor, tool)",
        "README.md:5: `components.sizing`: inferplane.components has no module or name 'sizing' "
        "(components/__init__.py)",
        "README.md:6: `from inferplane.components import VllmService, Gone`: inferplane.components has no module or "
        "name 'Gone' (components/__init__.py)",
        "README.md:6: `python -m inferplane.processor.nothing`: inferplane.processor has no module or name 'nothing' "
        "(processor/__init__.py)",
        "README.md:7: `inferplane.processor.config.Missing`: inferplane.processor.config has no module or name "
        "'Missing' (processor/config.py)",
    ]


def test_a_long_readme_and_an_orphan_page_are_found(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {
            "README.md": "# Project\n\n[Docs](docs/README.md)\n" + "line\n" * README_MAX_LINES,
            "docs/README.md": "# Docs\n\n- [Gateway](gateway.md)\n",
            "docs/gateway.md": "# Gateway\n",
            "docs/orphan.md": "# Nobody links here\n",
            "docs/deep/page.md": "# Nor here\n",
        },
    )
    assert unlinked_pages(root) == ["docs/deep/page.md", "docs/orphan.md"]
    assert readme_problem(root) == (
        f"README.md has {README_MAX_LINES + 3} lines, more than {README_MAX_LINES}: move reference material into docs/"
    )
    (root / "README.md").write_text("# Project\n")
    assert readme_problem(root) is None
    assert unlinked_pages(root) == ["docs/deep/page.md", "docs/orphan.md", "docs/README.md (from README.md)"]

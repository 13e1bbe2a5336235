"""Files the CLI reads and writes, safely: reads that never hang or raise a traceback, writes that are atomic.

* :func:`read_regular_file` reads a regular file only (never a directory, FIFO or device, whose read would fail or
  block), bounded in size, as UTF-8; every failure is an :class:`UnreadableFileError` with a one-line reason.
* :class:`OutputFiles` claims every destination before any work (a temporary file beside each, so a directory, a
  missing folder or an unwritable place is refused up front), then publishes them all by rename, or none.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path
from types import TracebackType


class UnreadableFileError(Exception):
    """A file that cannot be read; ``str()`` is the reason, without the file name."""


class UnwritableFileError(Exception):
    """A destination that cannot be written; ``str()`` names the file and the reason."""


def os_reason(exc: OSError) -> str:
    """A one-line reason for ``exc``, without the file name (the caller names it)."""
    if exc.errno == errno.ENAMETOOLONG:
        return "the file name is too long"
    if exc.errno == errno.ENOTDIR:
        return "a part of the path is a file, not a directory"
    return exc.strerror or type(exc).__name__


def read_regular_file(path: Path, limit: int) -> str:
    """The UTF-8 text of ``path``, at most ``limit`` bytes; raises :class:`UnreadableFileError`."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise UnreadableFileError("no such file") from None
    except OSError as exc:
        raise UnreadableFileError(f"cannot read: {os_reason(exc)}") from None
    except ValueError:  # os.stat refuses a path with a NUL byte this way
        raise UnreadableFileError("the path holds a NUL byte") from None
    if stat.S_ISDIR(info.st_mode):
        raise UnreadableFileError("is a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise UnreadableFileError("is not a regular file (a pipe, socket or device is never read)")
    if info.st_size > limit:
        raise UnreadableFileError(f"is {info.st_size} bytes, more than the {limit} accepted")
    try:
        # O_NONBLOCK: should the file be swapped for a FIFO after the stat, the open still returns at once.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise UnreadableFileError(f"cannot read: {os_reason(exc)}") from None
    if len(data) > limit:
        raise UnreadableFileError(f"is more than the {limit} bytes accepted")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UnreadableFileError(
            f"is not UTF-8 text: byte 0x{data[exc.start]:02x} on line {line} (offset {exc.start})"
        ) from None


def _umask() -> int:
    current = os.umask(0o022)
    os.umask(current)
    return current


class OutputFiles:
    """Destinations claimed up front and published together.

    ``claim(flag, path)`` refuses a path that is a directory, lies in a missing or unwritable folder, or is
    claimed twice, by creating its temporary file in the same folder at once. ``publish(path, text)`` stages the
    text; leaving the ``with`` block normally renames every staged file into place. On an exception, or for a
    destination never staged, the temporary files are removed and the destinations are left as they were.
    """

    def __init__(self) -> None:
        self._claimed: dict[Path, tuple[str, str, Path]] = {}
        self._texts: dict[Path, str] = {}

    def claim(self, flag: str, path: str) -> None:
        """Reserve ``path`` for ``flag`` (``--json``); raises :class:`UnwritableFileError`."""
        target = Path(path)
        where = f"{flag} {path}"
        try:
            resolved = target.resolve()
        except (OSError, RuntimeError, ValueError) as exc:
            raise UnwritableFileError(f"{where}: cannot resolve the path ({exc})") from None
        for other_flag, other_path, _ in (v for k, v in self._claimed.items() if k == resolved):
            raise UnwritableFileError(f"{where}: the same file as {other_flag} {other_path}; give each its own")
        try:
            if resolved.is_dir():
                raise UnwritableFileError(f"{where}: is a directory; give a file name")
            if resolved.exists() and not resolved.is_file():
                raise UnwritableFileError(f"{where}: is not a regular file")
            if not resolved.parent.is_dir():
                raise UnwritableFileError(f"{where}: the folder {resolved.parent} does not exist")
            fd, temporary = tempfile.mkstemp(prefix=f".{resolved.name[:100]}.", suffix=".tmp", dir=resolved.parent)
        except OSError as exc:
            raise UnwritableFileError(f"{where}: cannot write there: {os_reason(exc)}") from None
        os.close(fd)
        self._claimed[resolved] = (flag, path, Path(temporary))

    def publish(self, path: str, text: str) -> None:
        """Stage ``text`` for a claimed ``path``; it is written when the block ends."""
        self._texts[Path(path).resolve()] = text

    def __enter__(self) -> OutputFiles:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            if kind is None:
                self._commit()
        finally:
            for _, _, temporary in self._claimed.values():
                temporary.unlink(missing_ok=True)

    def _commit(self) -> None:
        staged = [
            (target, temporary, self._texts[target])
            for target, (_, _, temporary) in self._claimed.items()
            if target in self._texts
        ]
        mode = 0o666 & ~_umask()  # what a plain open() would have given; mkstemp makes 0600
        try:
            for _, temporary, text in staged:
                temporary.write_text(text, encoding="utf-8")
                temporary.chmod(mode)
        except OSError as exc:
            raise UnwritableFileError(f"cannot write the output: {os_reason(exc)}") from None
        for target, temporary, _ in staged:
            os.replace(temporary, target)

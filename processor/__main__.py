"""``python -m inferplane.processor --config /etc/inferplane/gateway/processor.json``: run the processor (its
supervisor, which starts ``workers`` worker processes and serves their metrics); ``--worker N`` runs one worker."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments, read the config, supervise or serve."""
    parser = argparse.ArgumentParser(prog="python -m inferplane.processor", description=__doc__)
    parser.add_argument("--config", required=True, help="the rendered processor.json")
    parser.add_argument("--log-level", default="INFO", help="Python logging level")
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)  # set by the supervisor
    parser.add_argument("--watch-socket", default=None, help=argparse.SUPPRESS)  # the supervisor's replica watcher
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Each role imports only what it runs: the supervisor never loads gRPC or the processor.
    if args.worker is None:
        from inferplane.processor.supervisor import supervise  # noqa: PLC0415

        sys.exit(supervise(args.config, args.log_level))
    from inferplane.processor.config import ProcessorConfig  # noqa: PLC0415
    from inferplane.processor.server import serve  # noqa: PLC0415

    asyncio.run(serve(ProcessorConfig.load(args.config), args.worker, watch_socket=args.watch_socket))


if __name__ == "__main__":
    main()

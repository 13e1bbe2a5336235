"""``python -m inferplane.gateway --config /etc/inferplane/gateway/processor.json``: run the processor."""

from __future__ import annotations

import argparse
import asyncio
import logging

from inferplane.gateway.config import ProcessorConfig
from inferplane.gateway.server import serve


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments, read the config, serve."""
    parser = argparse.ArgumentParser(prog="python -m inferplane.gateway", description=__doc__)
    parser.add_argument("--config", required=True, help="the rendered processor.json")
    parser.add_argument("--log-level", default="INFO", help="Python logging level")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(serve(ProcessorConfig.load(args.config)))


if __name__ == "__main__":
    main()

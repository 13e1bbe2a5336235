"""The processor's Redis over TLS as the GKE gateway meets Memorystore: a per-instance CA it is told to trust, a
server certificate that names the IP only in its CN, the client connecting by IP. A real Redis behind a TLS
terminator on 127.0.0.1 (Python's ``ssl``, as Memorystore terminates TLS in front of Redis); the budgets work
through it, and fail open (counted as Redis errors) when the server's certificate chains to another CA."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ssl
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from prometheus_client import CollectorRegistry

from inferplane.processor.config import ProcessorConfig
from inferplane.processor.ext_proc import Processor
from inferplane.processor.metrics import PROCESSOR_ERRORS_TOTAL, STAGE_LABEL
from tests.ports import free_port
from tests.processor.test_ext_proc import _config as base_config
from tests.redis_server import redis_server

URL_ENV = "TEST_INFERPLANE_REDIS_URL"


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(
    subject: str, key: ec.EllipticCurvePrivateKey, issuer: str, issuer_key: ec.EllipticCurvePrivateKey, *, ca: bool
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .sign(issuer_key, hashes.SHA256())
    )


def _pem(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


def authority(directory: Path, name: str) -> tuple[Path, Path, Path]:
    """(CA file, server certificate, server key): a CA and a server certificate it signed whose only name is the
    subject CN ``127.0.0.1`` (no subjectAltName), the shape Memorystore's server certificates have."""
    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = _certificate(f"{name} CA", ca_key, f"{name} CA", ca_key, ca=True)
    server = _certificate("127.0.0.1", server_key, f"{name} CA", ca_key, ca=False)
    paths = directory / f"{name}-ca.pem", directory / f"{name}-server.pem", directory / f"{name}-server.key"
    paths[0].write_bytes(_pem(ca))
    paths[1].write_bytes(_pem(server))
    paths[2].write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return paths


@contextlib.asynccontextmanager
async def tls_terminator(certificate: Path, key: Path, redis_port: int) -> AsyncIterator[int]:
    """A TLS listener on 127.0.0.1 piping each connection to the plain Redis; yields its port."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificate, key)

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def handle(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", redis_port)
        await asyncio.gather(pipe(client_reader, upstream_writer), pipe(upstream_reader, client_writer))

    port = free_port()
    server = await asyncio.start_server(handle, "127.0.0.1", port, ssl=context)
    try:
        yield port
    finally:
        server.close()


def processor_config(ca_file: Path) -> ProcessorConfig:
    """The processor tests' config (one model, tenant ``t``) with a 1-per-minute budget, the URL in ``URL_ENV`` and
    ``ca_file`` as the only trusted CA."""
    return base_config(None, requests_per_minute=1, tokens_per_minute=1000).model_copy(
        update={"redis_url_env": URL_ENV, "redis_ca_file": str(ca_file), "redis_timeout_seconds": 2.0}
    )


def redis_errors(registry: CollectorRegistry) -> float:
    value = registry.get_sample_value(PROCESSOR_ERRORS_TOTAL, {STAGE_LABEL: "redis"})
    return value or 0.0


@pytest.fixture(scope="module")
def redis_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    with redis_server(tmp_path_factory.mktemp("redis-tls")) as running:
        yield running.port


@pytest.mark.parametrize(
    ("served_by", "trusted", "shared"), [("memorystore", "memorystore", True), ("impostor", "memorystore", False)]
)
def test_budgets_reach_redis_through_tls_only_with_the_instances_ca(  # noqa: PLR0917 - fixtures and parameters
    redis_port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, served_by: str, trusted: str, shared: bool
) -> None:
    authorities = {name: authority(tmp_path, name) for name in {served_by, trusted}}
    trusted_ca = authorities[trusted][0]
    _, certificate, key = authorities[served_by]
    registry = CollectorRegistry()

    async def run() -> None:
        async with tls_terminator(certificate, key, redis_port) as port:
            monkeypatch.setenv(URL_ENV, f"rediss://127.0.0.1:{port}")
            processor = Processor.from_environment(processor_config(trusted_ca), registry)
            first, _ = await processor.budgets.admit("t", 1, 1000, 10)
            second, reason = await processor.budgets.admit("t", 1, 1000, 10)
            if shared:
                # The second request exceeds the 1-per-minute budget held in Redis.
                assert (first.redis_ok, first.retry_after) == (True, None)
                assert second.retry_after is not None and reason == "requests_per_minute"
                assert redis_errors(registry) == 0
            else:
                # The impostor's certificate is refused: budgets fail open, each failure counted.
                assert (first.redis_ok, second.redis_ok) == (False, False)
                assert first.retry_after is None and second.retry_after is None
                assert redis_errors(registry) == 2

    asyncio.run(run())

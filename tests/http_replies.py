"""What the tests' small HTTP servers (``http.server`` handlers standing for an embedder or a replica) send back."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler


def send_json(handler: BaseHTTPRequestHandler, body: bytes, status: int = 200) -> None:
    """Answer ``handler``'s request with ``body`` as JSON, its length given (the connection can be kept alive)."""
    handler.send_response(status)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)

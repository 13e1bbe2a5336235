"""The one door to AWS: registered calls only, and every failure turned into a sentence.

Checks never touch boto3 directly. :meth:`AwsCaller.call` looks the call up in the check's registry entry
(:mod:`~.registry`), makes it, and turns botocore's failures into exceptions whose ``str()`` is the
one-line message a person reads:

* :class:`PreflightError`: nothing can be checked (no credentials, credentials refused, endpoint unreachable);
* :class:`CallDeniedError`: IAM refused one call; the message names the missing action;
* :class:`CallUnavailableError`: the API is not offered where the caller reached (an older partition, an emulator);
* :class:`CallFailedError`: any other service error, with its code.

Endpoints: boto3 honours ``AWS_ENDPOINT_URL`` and ``AWS_ENDPOINT_URL_<SERVICE>`` itself (botocore's config
provider, ``configprovider.py``), which is how a local emulator or a VPC endpoint is reached.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import boto3
from botocore.client import BaseClient
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError,
    NoCredentialsError,
    PartialCredentialsError,
    ProfileNotFound,
)

from inferplane.tool.preflight.registry import ApiCall, CheckSpec

ClientFor = Callable[[ApiCall], BaseClient]
"""Hands out the client a registered call is made with (tests route single calls to stubbed clients)."""

# Error codes IAM (or the service's authorizer) answers a call the principal may not make with; a bare HTTP 403
# whose body botocore cannot parse surfaces as code "403".
_DENIED = frozenset({"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnauthorizedException", "403"})
# Codes meaning the credentials themselves were refused: no check can run.
_BAD_CREDENTIALS = frozenset(
    {
        "AuthFailure",
        "ExpiredToken",
        "ExpiredTokenException",
        "InvalidClientTokenId",
        "RequestExpired",
        "SignatureDoesNotMatch",
        "UnrecognizedClientException",
    }
)
# The operation does not exist at the endpoint reached (botocore surfaces a bare HTTP 404 as code "404").
_UNAVAILABLE = frozenset({"UnknownOperationException", "InvalidAction", "NotImplemented", "404"})


class PreflightError(Exception):
    """No check can run; ``str()`` is the one-line reason."""


class ApiCallError(Exception):
    """One registered call did not answer; ``str()`` is the one-line reason."""

    def __init__(self, call: ApiCall, code: str, message: str) -> None:
        self.call = call
        self.code = code
        self.detail = message
        super().__init__(self.render())

    def render(self) -> str:
        return f"{self.call.iam_action} failed: {self.code}: {self.detail}"


class CallDeniedError(ApiCallError):
    """IAM refused the call."""

    def render(self) -> str:
        return (
            f"permission missing: {self.call.iam_action} was denied ({self.code}); "
            "grant it (inferplane preflight --print-iam-policy)"
        )


class CallUnavailableError(ApiCallError):
    """The API is not offered at the endpoint reached."""

    def render(self) -> str:
        return f"{self.call.iam_action} is not available here ({self.code}: {self.detail})"


class CallFailedError(ApiCallError):
    """Any other service error."""


class AwsCaller:
    """Makes registered calls for checks; see the module docstring for the errors it raises."""

    def __init__(self, client_for: ClientFor) -> None:
        self._client_for = client_for

    def call(self, check: CheckSpec, api: ApiCall, **params: Any) -> dict[str, Any]:
        """One request; ``api`` must be one of ``check``'s registered calls."""
        response: dict[str, Any] = self._guard(api, lambda: getattr(self._client(check, api), api.method)(**params))
        return response

    def pages(self, check: CheckSpec, api: ApiCall, **params: Any) -> Iterator[dict[str, Any]]:
        """Every page of a paginated call (one page when the operation does not paginate)."""
        client: BaseClient = self._guard(api, lambda: self._client(check, api))
        if not client.can_paginate(api.method):
            yield self.call(check, api, **params)
            return
        iterator = iter(client.get_paginator(api.method).paginate(**params))
        while True:
            page = self._guard(api, lambda: next(iterator, None))
            if page is None:
                return
            yield page

    def _client(self, check: CheckSpec, api: ApiCall) -> BaseClient:
        if api not in check.calls:
            # A programming error, not a user's: the registry (and so the IAM policy) must list every call.
            raise AssertionError(f"{check.id} makes {api.iam_action} without registering it")
        try:
            return self._client_for(api)
        except ValueError as exc:  # botocore refuses a malformed endpoint (AWS_ENDPOINT_URL) this way
            raise PreflightError(f"cannot make an AWS {api.service} client: {exc}") from None

    @staticmethod
    def _guard(api: ApiCall, thunk: Callable[[], Any]) -> Any:
        try:
            return thunk()
        except (NoCredentialsError, PartialCredentialsError) as exc:
            raise PreflightError(
                f"no usable AWS credentials ({exc}); set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
                "or run where a role is attached"
            ) from None
        except ProfileNotFound as exc:
            raise PreflightError(f"AWS profile problem: {exc}") from None
        except ConnectionError as exc:
            raise PreflightError(f"cannot reach AWS for {api.iam_action}: {exc}") from None
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = str(error.get("Code", "Unknown"))
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            message = _one_line(str(error.get("Message", "")), status)
            if code in _BAD_CREDENTIALS:
                raise PreflightError(f"AWS refused the credentials ({code}: {message})") from None
            if code in _DENIED:
                raise CallDeniedError(api, code, message) from None
            if code in _UNAVAILABLE:
                raise CallUnavailableError(api, code, message) from None
            raise CallFailedError(api, code, message) from None
        except BotoCoreError as exc:
            raise CallFailedError(api, type(exc).__name__, str(exc)) from None


def _one_line(message: str, status: object) -> str:
    """A service message fit for one report line: an HTML error page (a proxy, an emulator) becomes its status."""
    text = " ".join(message.split())
    if not text or text.lower().startswith(("<!doctype", "<html")):
        return f"HTTP {status}, no AWS error body"
    return text if len(text) <= 200 else text[:197] + "..."


def boto3_client_for(region: str, session: boto3.Session | None = None) -> ClientFor:
    """Real clients, one per service, in ``region``, with bounded retries and timeouts.

    The default session is made on first use, inside :meth:`AwsCaller.call`, so that a broken profile
    (``AWS_PROFILE`` naming none) becomes a :class:`PreflightError` like any other credential problem.
    """
    config = Config(
        region_name=region, retries={"mode": "standard", "max_attempts": 3}, connect_timeout=5, read_timeout=30
    )
    sessions: list[boto3.Session] = [session] if session is not None else []
    clients: dict[str, BaseClient] = {}

    def client_for(api: ApiCall) -> BaseClient:
        if not sessions:
            sessions.append(boto3.Session())
        if api.service not in clients:
            clients[api.service] = sessions[0].client(api.service, config=config)
        return clients[api.service]

    return client_for

"""How every component reports bad inputs: all problems at once, as ``pulumi.InputPropertiesError``.

Pulumi's component guidelines ask for input errors collected and raised together, each with the property path it
concerns, so a user fixes a stack in one pass and nothing is half-applied. Shared by every component subpackage
(AWS, GCP, serving, gateway, platform), so it lives at the bottom beside the spec it validates.
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi

InputErrors = list[tuple[str, str]]
"""(property path, reason) pairs collected by a component's checks."""


def raise_input_errors(message: str, errors: Sequence[tuple[str, str]]) -> None:
    """Raise every problem at once as ``pulumi.InputPropertiesError`` (nothing is half-applied), or do nothing.

    The exception's text lists each ``path: reason`` too, so the CLI shows them without the structured details.
    """
    if not errors:
        return
    details = "; ".join(f"{path}: {reason}" for path, reason in errors)
    raise pulumi.InputPropertiesError(
        f"{message} {details}",
        errors=[{"property_path": path, "reason": reason} for path, reason in errors],
    )

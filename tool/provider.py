"""The multi-language component provider: Pulumi's component provider host serving :class:`Platform`.

How the engine starts it: ``pulumi package add <repo>@<version>`` (or a ``packages:`` entry) finds
``PulumiPlugin.yaml`` (``runtime: python``) at the repository root; ``pulumi-language-python`` then runs the plugin
in the project's virtualenv. With no ``__main__.py`` at the root and a buildable ``pyproject.toml``, it runs
``python -m pulumi.run.plugin inferplane <engine address>``, which imports :mod:`inferplane`, finds no components
exported there, and runs ``python -m inferplane`` (:mod:`inferplane.__main__`), i.e. :func:`main`. The host prints
its gRPC port on stdout and answers ``GetSchema`` (the schema inferred from the components' annotations) and
``Construct``.
"""

from __future__ import annotations

from inferplane import __version__
from inferplane.components.platform import HOSTED_COMPONENTS
from inferplane.tool.schema import PACKAGE_NAME


def main() -> None:
    """Serve the hosted components until the engine stops the process."""
    from pulumi.provider.experimental import component_provider_host  # noqa: PLC0415 - only the provider needs it

    component_provider_host(list(HOSTED_COMPONENTS), PACKAGE_NAME, version=__version__)

"""inferplane: an LLM inference platform as code.

One namespace for everything the distribution installs, so a platform team's own ``components`` or ``infra``
package never collides with ours:

* :mod:`inferplane.components`: the library (catalogs, the platform spec, sizing, Pulumi components);
* :mod:`inferplane.infra`: the Pulumi program that composes them for one stack;
* :mod:`inferplane.policies`: the CrossGuard policy pack;
* :mod:`inferplane.tool`: the ``inferplane`` command (offline preview, preflight, sizing);
* :mod:`inferplane.processor`: the gateway's admission processor (runtime code shipped in its own image).

In the repository these are the top-level folders ``components/``, ``infra/``, ``policies/``, ``tool/`` and
``processor/``; this package links them (relative symlinks), so the source tree shows the architecture and the
import names stay unique.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("inferplane")
except PackageNotFoundError:  # a source checkout that was never installed
    __version__ = "0+unknown"

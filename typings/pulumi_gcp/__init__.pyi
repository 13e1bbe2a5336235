# Type-checking view of pulumi_gcp's top-level package, used by mypy only (``mypy_path`` in pyproject.toml).
#
# The real ``pulumi_gcp/__init__.py`` imports all ~140 service modules under ``TYPE_CHECKING``, so any import of
# pulumi_gcp makes mypy analyse the whole 290 MB SDK (measured: 72 s and 2.2 GB cold for a one-line file). This
# stub names only the modules inferplane uses; mypy resolves each of them from the installed SDK, so their types
# are checked exactly as before. Using another service module needs one more line here (mypy says
# 'Module has no attribute ...' until then).
from pulumi_gcp import compute as compute
from pulumi_gcp import container as container
from pulumi_gcp import kms as kms
from pulumi_gcp import organizations as organizations
from pulumi_gcp import projects as projects
from pulumi_gcp import redis as redis
from pulumi_gcp import serviceaccount as serviceaccount
from pulumi_gcp.provider import Provider as Provider
from pulumi_gcp.provider import ProviderArgs as ProviderArgs

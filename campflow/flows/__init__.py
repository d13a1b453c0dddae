"""Prefect flows: evaluate, improve, watch. Its modules import Prefect; the package itself does not.

Prefect reads its settings when first imported, so the offline-friendly defaults are set here: no
telemetry (the machine may have no network) and room for a slow first start of the ephemeral API.
Explicit environment variables win.
"""

import os

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")

from campflow.flows import prefect_patches  # noqa: E402  (after the settings above: it reads none, but keep them first)

prefect_patches.install()

"""Shared by every test directory: this file puts ``tests/`` on the import path, so that
``from deadline import wait_until`` works in unit, integration and system tests alike, and
``tests/integration`` too, so that the system tests start their daemons with the same
``cluster_helpers`` the integration tests use (one module, under one name)."""

import sys
from pathlib import Path

_INTEGRATION = str(Path(__file__).resolve().parent / "integration")
if _INTEGRATION not in sys.path:
    sys.path.append(_INTEGRATION)

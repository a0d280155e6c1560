"""The chaos tier reuses the integration tier's helpers (oracle, workers, topics, waiting): their directory is
put on the import path as pytest puts it for the integration tests themselves."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

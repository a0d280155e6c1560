"""placeholder"""

from typing import Any

CONTINUAL_CELLS: list[dict[str, Any]] = []

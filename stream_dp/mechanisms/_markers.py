"""Named marker outputs of mechanisms (compared by identity), e.g. ``THRESHOLD`` and ``UNLISTED``."""

from __future__ import annotations


class Marker:
    """A singleton per name: ``Marker("X") is Marker("X")``, also after copying or pickling."""

    _by_name: dict[str, "Marker"] = {}
    __slots__ = ("name",)
    name: str

    def __new__(cls, name: str) -> "Marker":
        marker = cls._by_name.get(name)
        if marker is None:
            marker = super().__new__(cls)
            marker.name = name
            cls._by_name[name] = marker
        return marker

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return (Marker, (self.name,))

    def __repr__(self) -> str:
        return self.name

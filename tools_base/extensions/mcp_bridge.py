"""Placeholder, replaced by the real extension."""

from typing import Any


def register(api: Any) -> None:
    raise NotImplementedError

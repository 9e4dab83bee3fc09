"""The base of every wire and audit model. No I/O."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """Base of every wire and audit model: unknown fields refused, no coercion."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)

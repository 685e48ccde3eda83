"""JSON Schema -> Lark converter: the definition of each MaskBench schema's language for the harness.

:func:`schema_to_lark` (semantic choices in :mod:`.convert`'s docstring), :class:`UnsupportedSchema` (the one
exception it raises), :func:`canonical` (an instance's keys in the grammar's order) and :func:`serialize`.
"""
from __future__ import annotations

import json

from gcdbench.parsers.jsonschema.convert import WHITESPACE, schema_to_lark
from gcdbench.parsers.jsonschema.errors import EmptyLanguage, UnsupportedSchema
from gcdbench.parsers.jsonschema.order import canonical


def serialize(instance, schema, whitespace: str = "compact") -> str:
    """The JSON text a model writes for ``instance`` under ``schema``: keys in the grammar's order, then
    ``compact`` (``separators=(",", ":")``) or ``flexible`` (``indent=2``), non-ASCII characters kept."""
    if whitespace not in WHITESPACE:
        raise ValueError(f"whitespace={whitespace!r}; valid: {list(WHITESPACE)}")
    value = canonical(instance, schema)
    if whitespace == "compact":
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return json.dumps(value, indent=2, ensure_ascii=False)


__all__ = ["schema_to_lark", "serialize", "canonical", "UnsupportedSchema", "EmptyLanguage", "WHITESPACE"]

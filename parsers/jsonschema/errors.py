"""The one exception the JSON Schema converter raises for a schema it cannot turn into a grammar."""
from __future__ import annotations

from gcdbench.parsers.base import CompileError


class UnsupportedSchema(CompileError):
    """A schema (or part of it) the converter refuses: ``keyword`` is the JSON Schema keyword at fault,
    ``path`` the JSON pointer of the schema object holding it, ``why`` a short reason. A subclass of
    :class:`CompileError`, so the runner records it as a typed ``compile_error``."""

    def __init__(self, keyword: str, path: str, why: str):
        self.keyword, self.path, self.why = keyword, path, why
        super().__init__(f"JSON Schema keyword {keyword!r} at {path or '#'}: {why}")

    def __reduce__(self):   # picklable across worker processes
        return (type(self), (self.keyword, self.path, self.why))


class EmptyLanguage(UnsupportedSchema):
    """A (sub)schema that no value satisfies (``false``, types or enums that do not intersect, min > max): a
    refusal at the top, a dropped branch inside ``anyOf``/``oneOf``."""

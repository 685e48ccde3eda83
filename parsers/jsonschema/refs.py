"""``$ref`` resolution inside one schema document and the ``allOf`` merge the converter uses.

``$ref`` must be a fragment of this document (``#``, ``#/definitions/x``, ``#/$defs/x``, any JSON pointer with
``~0``/``~1`` and %-escapes); a remote or ``$id``-relative reference is refused (keyword ``$ref``).
A ``$ref`` with sibling keywords means both (draft 2019+; draft 7 would ignore the siblings): it is merged as
``allOf``.

``allOf`` is merged into one schema (:func:`merge`): ``type`` intersected, ``properties``/``patternProperties``
united (a property in both becomes ``allOf`` of the two), ``required`` united, ``enum``/``const`` intersected,
lower bounds maxed and upper bounds mined, ``additionalProperties: false`` in any part closes the merged object
over the union of the properties (an over-approximation: the spec closes it over that part's own properties),
``anyOf``/``oneOf`` in both become the ``anyOf`` of the pairwise ``allOf`` (at most :data:`MAX_PRODUCT`
branches), two different ``pattern``/``format``/``items`` list forms keep the first (an over-approximation).
An empty ``type`` intersection or ``enum`` intersection is refused (the language would be empty).
"""
from __future__ import annotations

import json
from urllib.parse import unquote

from gcdbench.parsers.jsonschema.errors import EmptyLanguage, UnsupportedSchema

#: keywords that carry no constraint
ANNOTATIONS = frozenset({"title", "description", "default", "examples", "example", "$comment", "$schema", "$id",
                         "id", "definitions", "$defs", "readOnly", "writeOnly", "deprecated", "$anchor", "markdownDescription",
                         "contentMediaType", "contentEncoding"})
MAX_PRODUCT = 64
MAX_DEPTH = 40
LOWER = ("minimum", "minLength", "minItems", "minProperties")
UPPER = ("maximum", "maxLength", "maxItems", "maxProperties")
TYPES = ("null", "boolean", "object", "array", "number", "integer", "string")


def key_of(schema) -> str:
    return json.dumps(schema, sort_keys=True, default=repr)


def constraining(schema: dict) -> dict:
    return {k: v for k, v in schema.items() if k not in ANNOTATIONS and not k.startswith("x-")}


class Resolver:
    """Resolves ``$ref`` fragments of one root document."""

    def __init__(self, root):
        self.root = root

    def resolve(self, ref, path: str):
        """``(schema, pointer)`` the reference names."""
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise UnsupportedSchema("$ref", path, f"only references inside the document (#/...) are supported, "
                                                  f"not {ref!r}")
        pointer = unquote(ref[1:])
        node = self.root
        if pointer:
            if not pointer.startswith("/"):
                raise UnsupportedSchema("$ref", path, f"{ref!r} is a plain-name ($anchor/$id) reference")
            for token in pointer[1:].split("/"):
                token = token.replace("~1", "/").replace("~0", "~")
                if isinstance(node, dict) and token in node:
                    node = node[token]
                elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                    node = node[int(token)]
                else:
                    raise UnsupportedSchema("$ref", path, f"{ref!r} names nothing in the document")
        if not isinstance(node, (dict, bool)):
            raise UnsupportedSchema("$ref", path, f"{ref!r} names a {type(node).__name__}, not a schema")
        return node, "#" + pointer

    def expand(self, schema, path: str, depth: int = 0):
        """``schema`` with its top-level ``$ref`` and ``allOf`` merged away (nested ones stay)."""
        if depth > MAX_DEPTH:
            raise UnsupportedSchema("allOf", path, "references/allOf nest too deep (a cycle through allOf or $ref)")
        if not isinstance(schema, dict):
            return schema
        if "$ref" in schema:
            target, tpath = self.resolve(schema["$ref"], path)
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            t = self.expand(target, tpath, depth + 1)
            if not constraining(rest):
                return t
            return self.merge(t, self.expand(rest, path, depth + 1), path)
        if "allOf" in schema:
            parts = schema["allOf"]
            if not isinstance(parts, list):
                raise UnsupportedSchema("allOf", path, "not a list")
            acc = self.expand({k: v for k, v in schema.items() if k != "allOf"}, path, depth + 1)
            for i, p in enumerate(parts):
                acc = self.merge(acc, self.expand(p, f"{path}/allOf/{i}", depth + 1), path)
            return acc
        return schema

    def merge(self, a, b, path: str):
        """One schema meaning ``a`` and ``b`` (as documented in the module)."""
        if a is False or b is False:
            return False
        if a is True or not isinstance(a, dict):
            return b
        if b is True or not isinstance(b, dict):
            return a
        out = dict(a)
        for k, vb in b.items():
            if k not in out:
                out[k] = vb
                continue
            va = out[k]
            if va == vb or k in ANNOTATIONS:
                continue
            if k == "type":
                ta = set(va if isinstance(va, list) else [va])
                tb = set(vb if isinstance(vb, list) else [vb])
                both = (ta & tb) | ({"integer"} if ("integer" in ta and "number" in tb) or
                                    ("number" in ta and "integer" in tb) else set())
                if not both:
                    raise EmptyLanguage("allOf", path, f"types {sorted(ta)} and {sorted(tb)} do not intersect")
                out[k] = [t for t in TYPES if t in both]
            elif k in ("properties", "patternProperties", "dependencies"):
                if isinstance(va, dict) and isinstance(vb, dict):
                    merged = dict(va)
                    for pk, pv in vb.items():
                        merged[pk] = {"allOf": [merged[pk], pv]} if pk in merged and merged[pk] != pv else pv
                    out[k] = merged
            elif k == "required":
                out[k] = list(dict.fromkeys([*va, *vb])) if isinstance(va, list) and isinstance(vb, list) else va
            elif k in ("additionalProperties", "unevaluatedProperties", "additionalItems", "items",
                       "propertyNames", "contains", "not"):
                if va is False or vb is False:
                    out[k] = False
                elif isinstance(va, list) or isinstance(vb, list):
                    pass   # two tuple forms: keep the first
                else:
                    out[k] = {"allOf": [va, vb]}
            elif k in ("enum", "const"):
                ea = va if k == "enum" else [va]
                eb = vb if k == "enum" else [vb]
                keys_b = {key_of(x) for x in eb}
                both = [x for x in ea if key_of(x) in keys_b]
                if not both:
                    raise EmptyLanguage(k, path, "allOf parts allow no common value")
                out.pop("const", None)
                out["enum"] = both
            elif k in LOWER:
                out[k] = max(va, vb)
            elif k in UPPER:
                out[k] = min(va, vb)
            elif k in ("exclusiveMinimum", "exclusiveMaximum"):
                if isinstance(va, bool) or isinstance(vb, bool):
                    out[k] = va or vb if isinstance(va, bool) and isinstance(vb, bool) else va
                else:
                    out[k] = max(va, vb) if k == "exclusiveMinimum" else min(va, vb)
            elif k in ("anyOf", "oneOf"):
                if len(va) * len(vb) > MAX_PRODUCT:
                    raise UnsupportedSchema(k, path, f"allOf of two {k} lists gives more than {MAX_PRODUCT} branches")
                out[k] = [{"allOf": [x, y]} for x in va for y in vb]
            # anything else (pattern, format, uniqueItems, multipleOf, if/then/else ...): keep the first
        if "oneOf" in out and "anyOf" in out:
            ao, oo = out.pop("anyOf"), out.pop("oneOf")
            if len(ao) * len(oo) > MAX_PRODUCT:
                raise UnsupportedSchema("oneOf", path, f"anyOf x oneOf gives more than {MAX_PRODUCT} branches")
            out["anyOf"] = [{"allOf": [x, y]} for x in ao for y in oo]
        return out

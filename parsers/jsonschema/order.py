"""An instance's object keys in the order the converter's grammar writes them (:mod:`.convert`): a schema's
``properties`` in definition order, then its ``required`` names not listed there, then the other keys in the
instance's own order. Which subschema applies inside ``anyOf``/``oneOf`` is the first branch the value fits by
a cheap structural test (type, required keys present, no key a closed object forbids); nested objects follow
the subschema of their property, pattern property or ``additionalProperties``, array elements their position.
"""
from __future__ import annotations

import json
import re

from gcdbench.parsers.jsonschema.errors import UnsupportedSchema
from gcdbench.parsers.jsonschema.refs import Resolver

MAX_DEPTH = 200


def _type_of(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer()):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


class _Orderer:
    def __init__(self, root):
        self.refs = Resolver(root)

    def flat(self, schema, path="#"):
        """``schema`` with top-level ``$ref``/``allOf`` merged, or True when that fails (then: keep the order)."""
        try:
            return self.refs.expand(schema, path)
        except UnsupportedSchema:
            return True

    def fits(self, v, s) -> bool:
        s = self.flat(s)
        if s is False:
            return False
        if not isinstance(s, dict):
            return True
        if "const" in s or "enum" in s:
            vals = [s["const"]] if "const" in s else s.get("enum") or []
            return any(json.dumps(v, sort_keys=True) == json.dumps(x, sort_keys=True) for x in vals)
        t = s.get("type")
        if t is not None:
            ts = t if isinstance(t, list) else [t]
            vt = _type_of(v)
            if vt not in ts and not (vt == "integer" and "number" in ts):
                return False
        if isinstance(v, dict):
            req = s.get("required", [])
            if isinstance(req, list) and any(r not in v for r in req if isinstance(r, str)):
                return False
            props = s.get("properties", {}) if isinstance(s.get("properties"), dict) else {}
            for k, sub in props.items():
                if k in v and sub is not True and isinstance(sub, dict) and ("type" in sub or "enum" in sub
                                                                            or "const" in sub):
                    if not self.fits(v[k], sub):
                        return False
            if s.get("additionalProperties", True) is False and not s.get("patternProperties"):
                if any(k not in props for k in v):
                    return False
        for kw in ("anyOf", "oneOf"):
            if isinstance(s.get(kw), list) and not any(self.fits(v, b) for b in s[kw]):
                return False
        return True

    def pick(self, v, s):
        """The subschema whose object/array structure applies to ``v``."""
        s = self.flat(s)
        for _ in range(MAX_DEPTH):
            if not isinstance(s, dict):
                return s
            for kw in ("anyOf", "oneOf"):
                if isinstance(s.get(kw), list) and s[kw]:
                    base = {k: x for k, x in s.items() if k != kw}
                    branches = [b if not base else {"allOf": [base, b]} for b in s[kw]]
                    chosen = next((b for b in branches if self.fits(v, b)), branches[0])
                    s = self.flat(chosen)
                    break
            else:
                return s
        return s

    def order(self, v, s, depth=0):
        if depth > MAX_DEPTH or not isinstance(v, (dict, list)):
            return v
        s = self.pick(v, s)
        s = s if isinstance(s, dict) else {}
        if isinstance(v, list):
            if "prefixItems" in s:
                prefix, rest = s["prefixItems"], s.get("items", True)
            elif isinstance(s.get("items"), list):
                prefix, rest = s["items"], s.get("additionalItems", True)
            else:
                prefix, rest = [], s.get("items", True)
            return [self.order(x, prefix[j] if j < len(prefix) else rest, depth + 1) for j, x in enumerate(v)]
        props = s.get("properties", {}) if isinstance(s.get("properties"), dict) else {}
        req = [r for r in s.get("required", []) if isinstance(r, str)] if isinstance(s.get("required"), list) else []
        keys = [k for k in props if k in v and props[k] is not False]
        keys += [k for k in dict.fromkeys(req) if k in v and k not in props]
        keys += [k for k in v if k not in keys]
        addl = s.get("additionalProperties", s.get("unevaluatedProperties", True))
        pp = s.get("patternProperties", {}) if isinstance(s.get("patternProperties"), dict) else {}
        out = {}
        for k in keys:
            if k in props:
                sub = props[k]
            else:
                sub = next((ps for pat, ps in pp.items() if _search(pat, k)), addl)
            out[k] = self.order(v[k], sub, depth + 1)
        return out


def _search(pattern: str, key: str) -> bool:
    try:
        return re.search(pattern, key) is not None
    except re.error:
        return False


def canonical(instance, schema):
    """``instance`` with every object's keys reordered as the converter's grammar writes them."""
    return _Orderer(schema).order(instance, schema)

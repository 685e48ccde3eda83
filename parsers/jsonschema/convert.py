r"""JSON Schema -> Lark grammar: the walk. Semantic choices (each a decision the field disagrees on):

* **Property order**: an object's properties come in the schema's ``properties`` order (as XGrammar and
  LLGuidance generate them); then the ``required`` names that ``properties`` does not list, in ``required`` order;
  then additional properties. Required properties must appear, optional ones may be left out.
  :func:`gcdbench.parsers.jsonschema.order.canonical` reorders an instance's keys the same way.
* **additionalProperties** defaults to ``true`` (the spec): an open object accepts, after its listed properties,
  any number of further members ``"key": any value`` whose key is none of the listed properties (a regex of the
  complement of that finite set; canonical encoding up to where the key leaves the listed ones). A schema value constrains their values;
  ``false`` closes the object. ``patternProperties`` add members whose key matches the pattern with that value
  schema; ``propertyNames`` (a string schema) constrains the additional keys. ``unevaluatedProperties`` is read as
  ``additionalProperties`` when that is absent. ``minProperties``/``maxProperties`` are ignored (over-approximation).
* **Arrays**: ``prefixItems`` (or draft-4 ``items`` as a list) fix the first elements, ``items`` (or
  ``additionalItems``) the rest; ``minItems`` exact; ``maxItems`` exact up to ``max_repeat`` (default 256), above it
  ignored. ``uniqueItems`` and ``contains`` are ignored (over-approximations: not context-free / not cheap).
* **Strings**: see :mod:`.strings` (escapes, ``pattern``) and :mod:`.formats` (``format``); ``minLength``/
  ``maxLength`` are a bounded repetition of one JSON character (a ``\uXXXX`` escape counts one; a surrogate pair
  two), a ``maxLength`` above ``max_repeat`` is ignored; with a ``pattern`` or a known ``format`` the lengths are
  ignored (over-approximation; the pattern/format wins, the pattern over the format).
* **Numbers**: see :mod:`.numbers` (integers exact within bounds; reals' bounds: sign only; ``multipleOf``
  ignored).
* **enum/const**: exactly the listed values (compact texts, or with flexible whitespace inside), filtered by
  ``type`` when both are given; other keywords beside ``enum`` are ignored.
* **Combinators**: ``anyOf`` is a union; ``oneOf`` is approximated by ``anyOf`` (exclusivity is not context-free:
  an over-approximation); ``allOf`` and ``$ref`` with siblings are merged (:mod:`.refs`); a schema's own keywords
  beside ``anyOf``/``oneOf`` are merged into each branch. ``not``, ``if``/``then``/``else``, ``dependencies``,
  ``dependentRequired``/``dependentSchemas`` are ignored (over-approximations).
* **No ``type``**: any JSON value, with each type's keywords applied to values of that type (the spec).
* **Whitespace**: ``compact`` is exactly ``json.dumps(x, separators=(",", ":"), ensure_ascii=False)``'s form;
  ``flexible`` allows one run of 1-64 of ``[ \t\n\r]`` before every key, value (not the top one), ``,``, ``:``,
  ``}`` and ``]`` (``json.dumps(x, indent=2)`` fits up to depth 31); no leading or trailing whitespace.
* A schema the converter cannot express raises :class:`UnsupportedSchema` (keyword, JSON pointer, reason); any
  other failure inside the converter is reported the same way with keyword ``(internal)``.
"""
from __future__ import annotations

import json

from gcdbench.parsers.jsonschema import formats, numbers, strings
from gcdbench.parsers.jsonschema.errors import EmptyLanguage, UnsupportedSchema
from gcdbench.parsers.jsonschema.refs import TYPES, Resolver, constraining, key_of

WHITESPACE = ("compact", "flexible")
WS_REGEX = r"[ \t\n\r]{1,64}"
MAX_RULES = 60000


def lark_regex(regex: str) -> str:
    """``regex`` as a Lark ``/.../`` literal: every unescaped ``/`` escaped, every ``"`` (escaped or not) written
    ``\\x22``: Lark's unescaping turns ``\\\\"`` (a literal backslash, then a quote) into ``\\"`` (a quote)."""
    out, i = [], 0
    while i < len(regex):
        c = regex[i]
        if c == "\\":
            pair = regex[i: i + 2]
            out.append("\\x22" if pair == '\\"' else pair)
            i += 2
            continue
        out.append("\\/" if c == "/" else "\\x22" if c == '"' else c)
        i += 1
    return "/" + "".join(out) + "/"


def lark_literal(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def compact(value) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class Converter:
    """One conversion: a root schema, its rules (name -> body) and terminals (regex -> name)."""

    def __init__(self, root, whitespace: str = "compact", max_repeat: int = 256):
        if whitespace not in WHITESPACE:
            raise ValueError(f"whitespace={whitespace!r}; valid: {list(WHITESPACE)}")
        self.root = root
        self.refs = Resolver(root)
        self.max_repeat = max_repeat
        self.o = "WS? " if whitespace == "flexible" else ""
        self.rules: dict[str, str] = {}
        self.terms: dict[str, str] = {}
        self.memo: dict[str, str] = {}

    # -- output ---------------------------------------------------------------------------------------
    def grammar(self) -> str:
        top = self.rule_for(self.root, "#")
        lines = [f"start: {top}"]
        lines += [f"{name}: {body}" for name, body in self.rules.items()]
        lines += [f"{name}: {lark_regex(rx)}" for rx, name in self.terms.items()]
        if self.o:
            lines.append(f"WS: {lark_regex(WS_REGEX)}")
        return "\n".join(lines) + "\n"

    def term(self, regex: str) -> str:
        if regex not in self.terms:
            self.terms[regex] = f"T{len(self.terms)}"
        return self.terms[regex]

    def new_rule(self, body: str | None = None) -> str:
        name = f"r{len(self.rules)}"
        if len(self.rules) > MAX_RULES:
            raise UnsupportedSchema("$ref", "#", f"the grammar grows past {MAX_RULES} rules")
        self.rules[name] = body if body is not None else ""
        return name

    # -- schemas --------------------------------------------------------------------------------------
    def rule_for(self, schema, path: str) -> str:
        """The rule name of ``schema``'s values (memoised on the schema's content, so recursion terminates)."""
        if schema is True or (isinstance(schema, dict) and not constraining(schema)):
            return self.any_value()
        if schema is False:
            raise EmptyLanguage("false", path, "a schema that no value satisfies, where a value is required")
        if not isinstance(schema, dict):
            raise UnsupportedSchema("(schema)", path, f"a schema must be an object or a boolean, not {schema!r}")
        k = key_of(schema)
        if k in self.memo:
            return self.memo[k]
        name = self.new_rule()
        self.memo[k] = name
        try:
            self.rules[name] = self.body(schema, path)
        except UnsupportedSchema:
            del self.memo[k], self.rules[name]
            raise
        return name

    def body(self, schema: dict, path: str) -> str:
        c = constraining(schema)
        if set(c) == {"$ref"}:
            target, tpath = self.refs.resolve(schema["$ref"], path)
            return self.rule_for(target, tpath)
        if "$ref" in c or "allOf" in c:
            merged = self.refs.expand(schema, path)
            return self.rule_for(merged, path)
        for kw in ("anyOf", "oneOf"):
            if kw in c:
                branches = c[kw]
                if not isinstance(branches, list) or not branches:
                    raise UnsupportedSchema(kw, path, "not a non-empty list")
                base = {k: v for k, v in schema.items() if k != kw}
                alts = []
                for i, b in enumerate(branches):
                    sub = b if not constraining(base) else {"allOf": [base, b]}
                    if sub is False or (isinstance(sub, dict) and sub.get("not") == {}):
                        continue
                    try:
                        alts.append(self.rule_for(sub, f"{path}/{kw}/{i}"))
                    except EmptyLanguage:
                        continue   # an empty branch contributes nothing
                if not alts:
                    raise EmptyLanguage(kw, path, "no branch allows any value")
                return " | ".join(dict.fromkeys(alts))
        if "enum" in c or "const" in c:
            return self.enum(c, path)
        types = c.get("type", list(TYPES))
        types = types if isinstance(types, list) else [types]
        bad = [t for t in types if t not in TYPES]
        if bad:
            raise UnsupportedSchema("type", path, f"unknown type(s) {bad}")
        if "number" in types and "integer" in types:
            types = [t for t in types if t != "integer"]
        alts = []
        for t in dict.fromkeys(types):
            alts.append(getattr(self, f"t_{t}")(c, path))
        if not alts:
            raise EmptyLanguage("type", path, "an empty type list allows no value")
        return " | ".join(alts)

    # -- literal values -------------------------------------------------------------------------------
    def enum(self, c: dict, path: str) -> str:
        values = [c["const"]] if "const" in c else c["enum"]
        if not isinstance(values, list):
            raise UnsupportedSchema("enum", path, "not a list")
        if "type" in c:
            ts = c["type"] if isinstance(c["type"], list) else [c["type"]]
            values = [v for v in values if _json_type(v) in ts or (_json_type(v) == "integer" and "number" in ts)]
        if not values:
            raise EmptyLanguage("enum", path, "no listed value has the schema's type: no value allowed")
        return " | ".join(dict.fromkeys(self.literal(v) for v in values))

    def literal(self, v) -> str:
        if not self.o or not isinstance(v, (list, dict)) or not v:
            return lark_literal(compact(v))
        o = self.o
        if isinstance(v, list):
            inner = f' {o}"," '.join(f"{o}{self.literal(x)}" for x in v)
            return f'"[" {inner} {o}"]"'
        inner = f' {o}"," '.join(f'{o}{lark_literal(compact(k))} {o}":" {o}{self.literal(x)}' for k, x in v.items())
        return f'"{{" {inner} {o}"}}"'

    # -- types ----------------------------------------------------------------------------------------
    def t_null(self, c, path):
        return '"null"'

    def t_boolean(self, c, path):
        return '"true" | "false"'

    def t_integer(self, c, path):
        rx = numbers.integer_for(c)
        if rx is None:
            raise EmptyLanguage("minimum", path, "the integer bounds allow no value")
        return self.term(rx)

    def t_number(self, c, path):
        return self.term(numbers.number_for(c))

    def t_string(self, c, path):
        if "pattern" in c:
            return self.term(strings.pattern_regex(c["pattern"], path))
        fmt = formats.format_regex(c.get("format")) if isinstance(c.get("format"), str) else None
        if fmt is not None:
            return self.term(f'"{fmt}"')
        lo = c.get("minLength", 0)
        hi = c.get("maxLength")
        if not isinstance(lo, int) or isinstance(lo, bool) or lo < 0:
            lo = 0
        if not isinstance(hi, int) or isinstance(hi, bool) or hi > self.max_repeat:
            hi = None
        if lo > self.max_repeat:
            raise UnsupportedSchema("minLength", path, f"minLength {lo} is over max_repeat={self.max_repeat}")
        if hi is not None and hi < lo:
            raise EmptyLanguage("maxLength", path, f"maxLength {hi} < minLength {lo}: no value allowed")
        return self.term(strings.length_bounded(lo, hi))

    def t_array(self, c, path):
        o = self.o
        if "prefixItems" in c:
            prefix, rest = c["prefixItems"], c.get("items", True)
        elif isinstance(c.get("items"), list):
            prefix, rest = c["items"], c.get("additionalItems", True)
        else:
            prefix, rest = [], c.get("items", True)
        if not isinstance(prefix, list):
            raise UnsupportedSchema("prefixItems", path, "not a list")
        lo = c.get("minItems", 0) if isinstance(c.get("minItems", 0), int) else 0
        hi = c.get("maxItems")
        if not isinstance(hi, int) or isinstance(hi, bool) or hi > self.max_repeat:
            hi = None
        if lo > self.max_repeat:
            raise UnsupportedSchema("minItems", path, f"minItems {lo} is over max_repeat={self.max_repeat}")
        if hi is not None and hi < lo:
            raise EmptyLanguage("maxItems", path, "maxItems < minItems: no array allowed")
        # the element rules by position, up to where the remaining ones are all `rest`
        slots = []
        n_explicit = max(len(prefix), lo)
        if hi is not None:
            n_explicit = min(n_explicit, hi)
        for j in range(n_explicit):
            s = prefix[j] if j < len(prefix) else rest
            sp = f"{path}/prefixItems/{j}" if j < len(prefix) else f"{path}/items"
            if s is False:
                if j < lo:
                    raise EmptyLanguage("items", path, "minItems needs an element the schema forbids")
                break
            slots.append(self.rule_for(s, sp))
        closed = len(slots) < n_explicit or rest is False or (len(prefix) > n_explicit and hi is not None)
        tail = ""
        if slots and not closed:
            rest_rule = self.rule_for(rest, f"{path}/items")
            tail = self.new_rule(f'({o}"," {o}{rest_rule})*') if hi is None else self._bounded_tail(rest_rule, hi - len(slots))
        # chain from the last explicit slot backwards; tails[j]: what follows when j elements were written
        nxt = tail
        for j in range(len(slots) - 1, -1, -1):
            sep = f'{o}"," ' if j > 0 else ""
            seq = f"{sep}{o}{slots[j]} {nxt}".strip()
            nxt = self.new_rule(seq if j < lo else f"({seq})?")
        if not slots:   # no explicit element: the array is empty or a run of `rest`
            if closed or hi == 0:
                return f'"[" {o}"]"'
            first = self.rule_for(rest, f"{path}/items")
            more = self.new_rule(f'({o}"," {o}{first})*') if hi is None else self._bounded_tail(first, hi - 1)
            nxt = self.new_rule(f"({o}{first} {more})?".replace(" )", ")"))
        return f'"[" {nxt} {o}"]"'

    def _bounded_tail(self, rule: str, k: int) -> str:
        """At most ``k`` further elements, each after a comma."""
        o = self.o
        body = ""
        for _ in range(max(k, 0)):
            body = self.new_rule(f'({o}"," {o}{rule} {body})?'.replace(" )", ")"))
        return body

    def t_object(self, c, path):
        o = self.o
        props = c.get("properties", {}) if isinstance(c.get("properties", {}), dict) else {}
        required = [r for r in c.get("required", []) if isinstance(r, str)] if isinstance(c.get("required"), list) \
            else []
        addl = c.get("additionalProperties", c.get("unevaluatedProperties", True))
        members = []   # (member expression, required)
        for name, sub in props.items():
            if sub is False:
                if name in required:
                    raise EmptyLanguage("required", path, f"required property {name!r} has schema false")
                continue
            try:
                value = self.rule_for(sub, f"{path}/properties/{_esc(name)}")
            except EmptyLanguage:
                if name in required:
                    raise
                continue   # no value fits: the property cannot appear
            members.append((f'{o}{lark_literal(compact(name))} {o}":" {o}{value}', name in required))
        for name in required:
            if name in props:
                continue
            if addl is False and not c.get("patternProperties"):
                raise UnsupportedSchema("required", path, f"required {name!r} is not a property of a closed object")
            value = self.rule_for(addl if addl is not False else True, f"{path}/additionalProperties")
            members.append((f'{o}{lark_literal(compact(name))} {o}":" {o}{value}', True))
        extras = []
        pp = c.get("patternProperties", {})
        if isinstance(pp, dict):
            for pat, sub in pp.items():
                if sub is False:
                    continue
                key = self.term(strings.pattern_regex(pat, f"{path}/patternProperties"))
                value = self.rule_for(sub, f"{path}/patternProperties/{_esc(pat)}")
                extras.append(f'{o}{key} {o}":" {o}{value}')
        if addl is not False:
            names = c.get("propertyNames")
            if isinstance(names, dict) and constraining(names):
                key = self.rule_for({**names, "type": "string"}, f"{path}/propertyNames")
            else:   # any key but the listed ones
                listed = [n for n in props if props[n] is not False] + [n for n in required if n not in props]
                key = self.term(strings.key_not_in(listed) if listed else f'"{strings.ANY_CHAR}*"')
            extras.append(f'{o}{key} {o}":" {o}{self.rule_for(addl, f"{path}/additionalProperties")}')
        extra = self.new_rule(" | ".join(dict.fromkeys(extras))) if extras else None
        # rest[i]: members i.. after something was written; first[i]: members i.. before anything was written
        rest = self.new_rule(f'({o}"," {extra})*') if extra else ""
        first = self.new_rule(f'({extra} ({o}"," {extra})*)?') if extra else ""
        for m, req in reversed(members):
            r_seq = f'{o}"," {m} {rest}'.strip()
            f_seq = f"{m} {rest}".strip()
            opt = f'({o}"," {m})? {rest}'.strip()
            new_rest = self.new_rule(r_seq if req else opt)
            if req:
                first = self.new_rule(f_seq)
            else:
                first = self.new_rule(f"{f_seq} | {first}" if first else f"({f_seq})?")
            rest = new_rest
        return f'"{{" {first} {o}"}}"'.replace("  ", " ")

    def any_value(self) -> str:
        """The rule of any JSON value (built once)."""
        if "__any__" in self.memo:
            return self.memo["__any__"]
        o = self.o
        name = self.new_rule()
        self.memo["__any__"] = name
        string = self.term(f'"{strings.ANY_CHAR}*"')
        number = self.term(numbers.NUMBER)
        member = self.new_rule(f'{o}{string} {o}":" {o}{name}')
        self.rules[name] = " | ".join([
            '"null"', '"true"', '"false"', number, string,
            f'"[" ({o}{name} ({o}"," {o}{name})*)? {o}"]"',
            f'"{{" ({member} ({o}"," {member})*)? {o}"}}"'])
        return name


def _esc(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _json_type(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "integer" if v.is_integer() else "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


def schema_to_lark(schema, *, whitespace: str = "compact", max_repeat: int = 256) -> str:
    """Lark grammar text (start rule ``start``) of the JSON texts that ``schema`` allows, as the module
    docstring defines them. Raises :class:`UnsupportedSchema` (only) when the schema cannot be converted."""
    if whitespace not in WHITESPACE:
        raise ValueError(f"whitespace={whitespace!r}; valid: {list(WHITESPACE)}")
    try:
        return Converter(schema, whitespace, max_repeat).grammar()
    except UnsupportedSchema:
        raise
    except RecursionError:
        raise UnsupportedSchema("$ref", "#", "the schema nests too deep for the converter") from None
    except Exception as err:   # a converter bug must still be a typed refusal for the runner
        raise UnsupportedSchema("(internal)", "#", f"{type(err).__name__}: {err}") from err

"""The JSON Schema -> Lark converter (gcdbench.parsers.jsonschema): each keyword's language on hand-picked JSON
texts, recursive references, typed refusals, compact vs flexible whitespace, and that the grammars load in the
project's Lark front end and the reference checker."""
from __future__ import annotations

import json

import lark
import pytest
from lark.exceptions import UnexpectedInput

from gcdbench.parsers.base import CompileError, GrammarSpec
from gcdbench.parsers.jsonschema import UnsupportedSchema, canonical, schema_to_lark, serialize


def parser(schema, whitespace="compact"):
    return lark.Lark(schema_to_lark(schema, whitespace=whitespace), parser="earley", lexer="dynamic_complete")


def check(schema, accept=(), reject=(), whitespace="compact"):
    p = parser(schema, whitespace)
    for text in accept:
        try:
            p.parse(text)
        except UnexpectedInput as err:
            raise AssertionError(f"{text!r} should be accepted: {err}") from None
    for text in reject:
        with pytest.raises(UnexpectedInput):
            p.parse(text)
            print("accepted:", text)


def test_scalar_types_and_type_lists():
    check({"type": "integer"}, ["0", "-5", "120"], ["1.5", "01", '"1"', "-", "1e3"])
    check({"type": "number"}, ["0", "-1.25", "3e-7", "2E+10"], ["01", ".5", "1.", "+1"])
    check({"type": "boolean"}, ["true", "false"], ["null", "True"])
    check({"type": ["string", "null"]}, ['"a"', "null"], ["1", "[]"])
    check({}, ["1", '"x"', "null", '{"a":[1,{}]}'], ["{a:1}", "[1,]"])


def test_integer_bounds_are_exact_and_number_bounds_keep_the_sign():
    check({"type": "integer", "minimum": -3, "exclusiveMaximum": 12}, ["-3", "0", "11"], ["-4", "12", "100"])
    check({"type": "integer", "minimum": 5, "exclusiveMinimum": True}, ["6", "1000"], ["5", "-6"])
    check({"type": "number", "minimum": 0, "maximum": 1}, ["0.5", "0", "7.5"], ["-0.5"])


def test_string_escapes_and_length():
    check({"type": "string"}, ['""', '"a\\"b"', '"\\u00e9\\n"', '"é"'], ['"a\nb"', '"\\x"', '"a'])
    check({"type": "string", "minLength": 2, "maxLength": 3}, ['"ab"', '"a\\nb"', '"\\u0041bc"'],
          ['"a"', '"abcd"'])


def test_pattern_anchors_classes_and_search_semantics():
    check({"type": "string", "pattern": "^[a-z]+\\d{2}$"}, ['"ab12"'], ['"ab1"', '"Ab12"', '"ab12x"'])
    check({"type": "string", "pattern": "ab"}, ['"xxabyy"', '"ab"'], ['"a b"'])
    check({"type": "string", "pattern": "^\\w+\\.(json|yaml)$"}, ['"a_1.json"', '"b.yaml"'], ['"a.txt"', '"é.json"'])
    check({"type": "string", "pattern": "^[^\"]*$"}, ['"abc"'], ['"a\\"b"'])
    check({"type": "string", "pattern": "^(a+)*$"}, ['""', '"aaa"'], ['"ab"'])
    # an escaped quote stays two characters through Lark's unescaping of regex literals
    check({"type": "string", "pattern": "^.*$"}, ['"a\\"b"', '"x\\\\"'], ['"a"b"'])
    check({"type": "string", "pattern": "\\\\$"}, ['"a\\\\"'], ['"a"', '"a\\""'])


def test_keys_with_escapes_are_exact():
    for key in ['a\\"b', "a\\", '"', "é\n"]:
        schema = {"type": "object", "properties": {key: {"const": key}}, "required": [key]}
        text = json.dumps({key: key}, separators=(",", ":"), ensure_ascii=False)
        check(schema, [text], [text.replace(":", ":1", 1)])


def test_formats_and_unknown_format():
    check({"type": "string", "format": "date-time"}, ['"2024-01-31T12:00:00Z"', '"2024-01-31T12:00:00.5+02:00"'],
          ['"2024-01-31"', '"yesterday"'])
    check({"type": "string", "format": "uuid"}, ['"123e4567-e89b-12d3-a456-426614174000"'], ['"123"'])
    check({"type": "string", "format": "ipv4"}, ['"10.0.0.255"'], ['"256.1.1.1"', '"1.2.3"'])
    check({"type": "string", "format": "email"}, ['"a.b@example.com"'], ['"nobody"'])
    check({"type": "string", "format": "int32"}, ['"anything at all"'], ["1"])


def test_enum_and_const_with_type_filter():
    check({"enum": ["a", 1, None, {"k": [1, 2]}]}, ['"a"', "1", "null", '{"k":[1,2]}'], ['"b"', "2", '{"k":[1]}'])
    check({"type": "string", "enum": ["a", 1]}, ['"a"'], ["1"])
    check({"const": "x"}, ['"x"'], ['"y"'])


def test_object_order_required_optional_and_additional_properties():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
              "required": ["b"], "additionalProperties": False}
    check(schema, ['{"b":"x"}', '{"a":1,"b":"x"}'], ['{"b":"x","a":1}', '{"a":1}', '{"a":1,"b":"x","c":2}', "{}"])
    open_ = {**schema, "additionalProperties": True}
    check(open_, ['{"a":1,"b":"x","c":[1]}', '{"b":"x","zz":null,"y":1}'],
          ['{"a":1,"b":"x","a":2}', '{"a":"no","b":"x"}', '{"b":1}'])
    typed = {**schema, "additionalProperties": {"type": "boolean"}}
    check(typed, ['{"b":"x","c":true}'], ['{"b":"x","c":1}'])
    check({"type": "object", "patternProperties": {"^x-": {"type": "integer"}}, "additionalProperties": False},
          ["{}", '{"x-a":1,"x-b":2}'], ['{"y":1}', '{"x-a":"s"}'])


def test_arrays_items_prefix_and_bounds():
    check({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3}, ["[1]", "[1,2,3]"],
          ["[]", "[1,2,3,4]", '["a"]'])
    check({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False},
          ["[]", '["a"]', '["a",1]'], ['["a",1,2]', "[1]"])
    check({"type": "array", "items": [{"type": "string"}], "additionalItems": {"type": "null"}},
          ['["a",null,null]'], ['["a",1]'])


def test_recursive_refs_definitions_defs_and_pointer_escapes():
    tree = {"$ref": "#/definitions/node",
            "definitions": {"node": {"type": "object", "properties": {
                "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/definitions/node"}}},
                "required": ["v"], "additionalProperties": False}}}
    check(tree, ['{"v":1}', '{"v":1,"kids":[{"v":2,"kids":[{"v":3}]}]}'], ['{"v":1,"kids":[{}]}'])
    escaped = {"$defs": {"a/b": {"type": "integer"}, "m~n": {"type": "string"}},
               "type": "array", "prefixItems": [{"$ref": "#/$defs/a~1b"}, {"$ref": "#/$defs/m~0n"}]}
    check(escaped, ['[1,"s"]'], ['["s",1]'])


def test_combinators():
    check({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 1}]}, ["1", '"a"'], ['"ab"', "null"])
    check({"oneOf": [{"type": "integer"}, {"type": "number"}]}, ["1", "1.5"], ['"a"'])   # oneOf read as anyOf
    check({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                     {"properties": {"b": {"type": "string"}}, "required": ["b"]}]},
          ['{"a":1,"b":"x"}'], ['{"a":1}', '{"b":"x"}'])
    # a branch whose merge with its siblings is empty drops out
    check({"type": "string", "anyOf": [{"type": "integer"}, {"maxLength": 2}]}, ['"ab"'], ['"abc"', "1"])
    # not / uniqueItems / multipleOf are ignored (over-approximations)
    check({"type": "array", "uniqueItems": True, "items": {"type": "integer", "multipleOf": 2}}, ["[1,1]"], [])


@pytest.mark.parametrize("schema, keyword, path", [
    ({"properties": {"x": {"type": "string", "pattern": "(?=a)b"}}}, "pattern", "#/properties/x"),
    ({"properties": {"x": {"type": "string", "pattern": "(a)\\1"}}}, "pattern", "#/properties/x"),
    ({"items": {"$ref": "http://example.com/s.json"}}, "$ref", "#/items"),
    ({"items": {"$ref": "#/definitions/missing"}}, "$ref", "#/items"),
    ({"allOf": [{"type": "string"}, {"type": "integer"}]}, "allOf", "#"),
    ({"type": "object", "required": ["a"], "additionalProperties": False}, "required", "#"),
])
def test_refusals_are_typed_and_name_keyword_and_pointer(schema, keyword, path):
    with pytest.raises(UnsupportedSchema) as err:
        schema_to_lark(schema)
    assert err.value.keyword == keyword and err.value.path == path
    assert isinstance(err.value, CompileError) and keyword in str(err.value)


def test_compact_vs_flexible():
    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}},
                                               "b": {"enum": [{"x": 1}]}}}
    value = {"a": [1, 2], "b": {"x": 1}}
    check(schema, [serialize(value, schema)], [json.dumps(value), '{ "a":[1]}'])
    check(schema, [serialize(value, schema, "flexible"), json.dumps(value), '{"a":[ 1 ,2 ] }', "{ }"],
          [" {}", "{}\n", '{"a":[1' + " " * 65 + "]}"], whitespace="flexible")


def test_serialize_orders_keys_as_the_grammar():
    schema = {"type": "object", "properties": {"z": {"type": "object", "properties": {"q": {}, "p": {}}}, "a": {}},
              "required": ["m"]}
    value = {"extra": 1, "a": 2, "m": 3, "z": {"p": 1, "q": 2}}
    assert list(canonical(value, schema)) == ["z", "a", "m", "extra"]
    assert list(canonical(value, schema)["z"]) == ["q", "p"]
    check(schema, [serialize(value, schema)], [json.dumps(value, separators=(",", ":"))])


def test_grammar_loads_in_reference_checker_and_agrees():
    from gcdbench.parsers.reference import ReferenceChecker

    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 10},
                                               "s": {"type": "string", "pattern": "^a.c$"}},
              "required": ["n"]}
    ref = ReferenceChecker(GrammarSpec("t", schema_to_lark(schema)))
    assert ref.is_sentence(b'{"n":10,"s":"abc"}') and ref.is_sentence(b'{"n":1,"other":[]}')
    assert not ref.is_sentence(b'{"n":11}') and not ref.is_sentence(b'{"s":"abc"}')
    assert ref.is_viable(b'{"n":1')


def test_random_valid_instances_parse():
    """Hand-built valid instances of a mixed schema (checked with jsonschema) are sentences, their serialization
    reads back as the same value, and each one's twin with a negative ``id`` (invalid: ``minimum: 0``) is not."""
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema checks that the instances are valid")
    import random

    schema = {"type": "object", "properties": {
        "id": {"type": "integer", "minimum": 0}, "tags": {"type": "array", "items": {"enum": ["a", "b"]}},
        "name": {"type": "string", "maxLength": 5}, "kind": {"anyOf": [{"type": "null"}, {"type": "boolean"}]}},
        "required": ["id"]}
    p = parser(schema)
    rng = random.Random(0)
    for _ in range(30):
        value = {"id": rng.randint(0, 10**6)}
        if rng.random() < 0.5:
            value["tags"] = [rng.choice("ab") for _ in range(rng.randint(0, 3))]
        if rng.random() < 0.5:
            value["name"] = "".join(rng.choice('x"\\\n é') for _ in range(rng.randint(0, 5)))
        if rng.random() < 0.5:
            value["kind"] = rng.choice([None, True, False])
        if rng.random() < 0.3:
            value["more"] = {"n": [1.5, None]}
        jsonschema.validate(value, schema)
        text = serialize(value, schema)
        assert json.loads(text) == value, text
        try:
            p.parse(text)
        except UnexpectedInput as err:
            raise AssertionError(f"{text!r} should be accepted: {err}") from None
        twin = {**value, "id": -1 - value["id"]}
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(twin, schema)
        with pytest.raises(UnexpectedInput):
            p.parse(serialize(twin, schema))

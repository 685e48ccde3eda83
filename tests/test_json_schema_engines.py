"""The native JSON Schema presets (``xgrammar_schema``, ``llguidance_schema``): each engine's own schema compiler
on ``GrammarSpec.json_schema``, compact separators by default, a typed refusal for a Lark-only grammar."""
from __future__ import annotations

import json

import pytest

from gcdbench.parsers.base import CompileError, GrammarSpec, allocate_mask, mask_get
from gcdbench.parsers.registry import engine_class

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"enum": ["x", "yz"]}}, "required": ["a"]}
PRESETS = {"xgrammar": {"grammar_form": "json_schema"}, "llguidance": {"grammar_form": "json_schema", "forcing": False}}


def accepts(engine, tok, text: str) -> bool:
    """Every token of ``text`` allowed and committed, then EOS allowed (an engine error is a rejection)."""
    mask = allocate_mask(tok.vocab_size)
    engine.reset()
    try:
        for t in tok.encode(text):
            engine.fill_mask(mask)
            if not mask_get(mask, t) or not engine.commit(t):
                return False
        engine.fill_mask(mask)
    except Exception:   # noqa: BLE001 - LLGuidance raises on a refused token
        return False
    return mask_get(mask, tok.eos_id)


@pytest.mark.parametrize("name", sorted(PRESETS))
@pytest.mark.parametrize("whitespace,inside,spaced", [("compact", True, False), ("flexible", True, True)])
def test_native_schema_compilers_take_the_schema(bytes_tokenizer, name, whitespace, inside, spaced):
    engine = engine_class(name)(**PRESETS[name], json_whitespace=whitespace)
    assert engine.reads_json_schema
    # the harness's converter may refuse a schema this engine still runs: the refusal does not stop it
    engine.compile(GrammarSpec("s", "", json_schema=json.dumps(SCHEMA), refusal="converter: not here"),
                   bytes_tokenizer)
    assert accepts(engine, bytes_tokenizer, '{"a":1,"b":"yz"}') is inside
    assert accepts(engine, bytes_tokenizer, '{"a": 1}') is spaced
    assert not accepts(engine, bytes_tokenizer, '{"b":"x"}')          # a required key missing
    assert not accepts(engine, bytes_tokenizer, '{"a":1,"b":"z"}')    # outside the enum
    engine.close()


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_a_lark_grammar_is_a_typed_refusal(bytes_tokenizer, name):
    with pytest.raises(CompileError, match="needs a JSON Schema"):
        engine_class(name)(**PRESETS[name]).compile(GrammarSpec("l", "start: A\nA: /a/\n"), bytes_tokenizer)

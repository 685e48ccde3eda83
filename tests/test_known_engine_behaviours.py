"""Engine behaviours that the off-gold audit found (README "Known engine behaviours"), pinned here so that a test
fails when an engine changes them (then README, configs and report notes need a new look).

LLGuidance's forced-byte fast-forward: where the grammar leaves one way to go on (after ``f`` of JSON's
``false``: ``alse``), LLGuidance by default allows only the token its tokenizer produces for those bytes, so with
a real vocabulary its mask is narrower than the language's. ``forcing=false`` (config ``llguidance_unforced``)
turns that off; its masks are then the language's.

XGrammar's UTF-8: inside a JSON string it allows the bytes A0-BF after ED, which spell the UTF-16 surrogates
U+D800-U+DFFF (not UTF-8: RFC 3629 section 3); the reference and the other engines allow only 80-9F there.
"""
from __future__ import annotations

import pytest

from gcdbench.datasets.base import load_grammar
from gcdbench.experiments.audit import Auditor
from gcdbench.parsers.base import allocate_mask, mask_to_ids
from gcdbench.parsers.registry import engine_class

# prefixes with forced bytes next (true/false/null part-way) and one without (inside a string)
PREFIXES = ["f", "[t", '{"k": nu', '["ab']


def masks(tok, forcing: bool):
    grammar = load_grammar("json")
    engine = engine_class("llguidance")(forcing=forcing)
    engine.compile(grammar, tok)
    auditor = Auditor(grammar, tok, engine.profile())
    mask = allocate_mask(tok.vocab_size)
    out = {}
    for text in PREFIXES:
        engine.reset()
        for t in tok.encode(text):
            assert engine.commit(t), f"llguidance refused a token of {text!r}"
        engine.fill_mask(mask)
        out[text] = auditor.compare(text.encode(), mask_to_ids(mask, tok.vocab_size))
    engine.close()
    return out


@pytest.mark.slow
def test_default_forcing_blocks_other_tokenizations_of_forced_bytes(qwen3_tokenizer):
    rows = masks(qwen3_tokenizer, forcing=True)
    for text in ("f", "[t", '{"k": nu'):
        assert not rows[text]["agree_profile"] and rows[text]["n_false_allow_profile"] == 0, text
        assert rows[text]["n_false_block_profile"] > 0, text
    assert rows['["ab']["agree_profile"]


@pytest.mark.slow
def test_unforced_masks_are_the_language(qwen3_tokenizer):
    rows = masks(qwen3_tokenizer, forcing=False)
    for text, row in rows.items():
        assert row["agree_profile"], (text, row)


def test_xgrammar_allows_encoded_surrogates_in_json_strings(bytes_tokenizer):
    tok = bytes_tokenizer
    grammar = load_grammar("json")
    engine = engine_class("xgrammar")()
    engine.compile(grammar, tok)
    auditor = Auditor(grammar, tok, engine.profile())
    mask = allocate_mask(tok.vocab_size)
    for prefix, extra in ((b'["\xed', set(range(0xA0, 0xC0))), (b'["\xe0', set()), (b'["\xf4', set())):
        engine.reset()
        for b in prefix:
            assert engine.commit(b)
        engine.fill_mask(mask)
        got = set(mask_to_ids(mask, tok.vocab_size).tolist())
        want = set(auditor.reference_ids(prefix, profile=True).tolist())
        assert want <= got and got - want == extra, (prefix, sorted(got - want), sorted(want - got))
    engine.close()

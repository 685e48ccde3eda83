"""Valiant's whole-mask memo (option ``mask_memo``): a prefix whose lexer configurations were met before copies the
mask computed then. The masks stay the reference's at every prefix, the memo is used where configurations repeat
(inside long regular terminals), it starts empty after ``reset`` and in a fork, and ``mask_memo=0`` turns it off."""
from __future__ import annotations

import pytest

from gcdbench.parsers.base import GrammarSpec
from gcdbench.parsers.reference import ReferenceChecker
from gcdbench.parsers.tokenizers import byte_level
from refwalk import engine_agrees

# long runs inside one terminal (names, quoted fields): the configuration (chart node, lexer state) recurs
CSVISH = GrammarSpec(name="csvish", lark=r'''
start: row ("\n" row)* "\n"?
row: field ("," field)*
field: NAME | QUOTED |
NAME: /[a-z]+/
QUOTED: /"([^"]|"")*"/
''')
TEXTS = [b'abcabc,"x""y""z",dd\nee,,"q\n"\n', b"aaaa,bbbb\ncccc", b'"' + b"ab" * 12 + b'"']


@pytest.fixture(scope="module")
def setup():
    from gcdbench.parsers.valiant.engine import ValiantEngine

    tok = byte_level()
    e = ValiantEngine(cache=False)
    e.compile(CSVISH, tok)
    return e, ReferenceChecker(CSVISH), tok


def test_memo_masks_equal_the_reference_and_are_used(setup):
    e, ref, tok = setup
    for data in TEXTS:
        engine_agrees(e, ref, tok, [data])
    assert e.counters["masks_reused"] > 10, e.counters


def test_memo_is_per_sequence(setup):
    """``reset`` and ``fork`` start with an empty memo: chart node numbers restart with the store."""
    e, ref, tok = setup
    engine_agrees(e, ref, tok, [TEXTS[1]])
    e.reset()
    assert not e._mm and not e._mm_seen
    f = e.fork()
    assert f.counters["masks_reused"] == 0 and not f._mm
    engine_agrees(f, ref, tok, [TEXTS[2]])
    assert f.counters["masks_reused"] > 0


def test_memo_off_and_bad_values():
    from gcdbench.parsers.valiant.engine import ValiantEngine

    tok = byte_level()
    e = ValiantEngine(cache=False, mask_memo=0)
    e.compile(CSVISH, tok)
    ref = ReferenceChecker(CSVISH)
    engine_agrees(e, ref, tok, [TEXTS[0]])
    assert e.counters["masks_reused"] == 0
    with pytest.raises(ValueError, match="mask_memo"):
        ValiantEngine(cache=False, mask_memo=-1).compile(CSVISH, tok)


def test_memo_turns_itself_off_where_keys_cycle_past_it():
    """Keys that repeat in a cycle longer than the memo would cost a copy a mask and never be read: after as many
    copies as it holds, with fewer than a quarter of them read, the memo is off for the rest of the sequence (masks
    still the reference's) and on again after ``reset``."""
    from gcdbench.parsers.valiant.engine import ValiantEngine

    cycle = GrammarSpec(name="cycle", lark='start: WORD ("," WORD)*\nWORD: /(abc)+/\n')
    tok = byte_level()
    e = ValiantEngine(cache=False, mask_memo=1)
    e.compile(cycle, tok)
    ref = ReferenceChecker(cycle)
    data = b"abc" * 6 + b",abcabc"    # the lexer states cycle a -> b -> c: three keys, one slot
    engine_agrees(e, ref, tok, [data])
    assert not e._mm_on and not e._mm and e.counters["masks_reused"] == 0
    e.reset()
    assert e._mm_on


# a counted repetition: 40 lexer states, one per position, but a one-byte token sees one byte ahead
COUNTED = GrammarSpec(name="counted", lark=r'''
start: (DIGEST "\n")+
DIGEST: /[0-9a-f]{40}/
''')


def test_states_of_a_counted_run_share_one_key_and_the_masks_repeat():
    """The states of a digest differ only beyond what a token reads (``Compiled.mask_keys``): they share a key, so
    the memo copies masks from the digest's third character on, and every mask stays the reference's."""
    from gcdbench.parsers.valiant.engine import ValiantEngine

    tok = byte_level()
    e = ValiantEngine(cache=False)
    e.compile(COUNTED, tok)
    keys = e.comp.mask_keys
    assert keys[0] == -1 and len(set(keys[1:])) <= len(keys) // 4, keys
    engine_agrees(e, ReferenceChecker(COUNTED), tok, [b"0123456789abcdef0123456789abcdef01234567\n" * 2])
    assert e.counters["masks_reused"] >= 60, e.counters

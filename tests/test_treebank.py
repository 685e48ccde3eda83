"""TreeBank POS grammar (induced from the data on load) and the embedded POS sample.

Lark's Earley parser takes seconds even on 4-tag sentences of the induced grammar (it is highly ambiguous), so
membership is checked with :class:`SpanRecognizer`, a small exact recognizer over the grammar *as Lark loads
it* (rules and string terminals from ``lark.Lark``). It is checked against the project's reference checker on
short sentences and their mutations, and against Lark on the embedded sample, so it can fail.
"""
from __future__ import annotations

import random

import lark
import pytest

from gcdbench.datasets.base import DataMissing
from gcdbench.datasets.sample import load_sample_pos
from gcdbench.datasets.treebank import (
    _induce,
    clean_tree,
    induce_treebank_grammar,
    load_treebank,
    normalize_label,
    pos_sequence,
    productions,
    read_trees,
)


class SpanRecognizer:
    """Exact CFG membership of a tag sequence: whitespace-separated tags, each the exact text of one terminal
    (the harness's scannerless readings, e.g. ``PRP$`` as ``PRP`` + ``$``, are not explored). Right to left,
    ``ends[i][A]`` is the bitmask of ``j`` such that ``A`` derives tags ``i..j``; the alternatives of a rule
    share prefixes (a trie) and are walked with a bitmask of positions. Needs a grammar without empty rules
    (the induced and the sample grammar have none)."""

    def __init__(self, text: str, start: str = "start"):
        g = lark.Lark(text, parser="earley", lexer="basic", start=start)
        self.tag_to_term = {}
        for t in g.terminals:
            if t.name in g.ignore_tokens:
                continue
            assert t.pattern.type == "str", t
            self.tag_to_term[t.pattern.value] = t.name
        self.start = start
        self.tries: dict = {}
        for r in g.rules:
            assert r.expansion, f"empty rule {r}"
            node = self.tries.setdefault(r.origin.name, [{}, False])
            for s in r.expansion:
                node = node[0].setdefault(s.name, [{}, False])
            node[1] = True

    def accepts(self, text: str) -> bool:
        try:
            toks = [self.tag_to_term[w] for w in text.split()]
        except KeyError:
            return False
        n = len(toks)
        tmask: dict = {}
        for k, t in enumerate(toks):
            tmask[t] = tmask.get(t, 0) | (1 << k)
        tries = self.tries
        ends: list = [None] * (n + 1)
        ends[n] = {}
        for i in range(n - 1, -1, -1):
            cur: dict = {}
            ends[i] = cur
            changed = True
            while changed:           # fixpoint for rules whose first symbol derives from i too (np: np pp)
                changed = False
                for lhs, trie in tries.items():
                    got = 0
                    stack = [(trie, 1 << i)]
                    while stack:
                        (kids, final), pos = stack.pop()
                        if final:
                            got |= pos
                        for sym, child in kids.items():
                            if sym in tries:
                                nxt, rest = 0, pos
                                while rest:
                                    low = rest & -rest
                                    rest ^= low
                                    nxt |= ends[low.bit_length() - 1].get(sym, 0)
                            else:
                                nxt = (pos & tmask.get(sym, 0)) << 1
                            if nxt:
                                stack.append((child, nxt))
                    if got != cur.get(lhs, 0):
                        cur[lhs] = got
                        changed = True
        return bool(ends[0].get(self.start, 0) >> n & 1)


# --------------------------------------------------------------------------------------------------
# Reading and normalising trees (no data needed)
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("raw, norm", [
    ("NP-SBJ-1", "NP"), ("PP-CLR", "PP"), ("NP=2", "NP"), ("WHNP-1", "WHNP"), ("ADVP-PRD-LOC=3", "ADVP"),
    ("NP", "NP"), ("PRP$", "PRP$"), (",", ","), ("``", "``"),
    ("-NONE-", "-NONE-"), ("-LRB-", "-LRB-"), ("-RRB-", "-RRB-"),
])
def test_normalize_label(raw, norm):
    assert normalize_label(raw) == norm


HAND = """
( (S
    (NP-SBJ-1 (PRP$ Our) (NN dog) )
    (VP (VBD barked)
      (NP (-NONE- *-1) )
      (SBAR (-NONE- 0) (S (NP-SBJ (-NONE- *T*-2) ) ) )
      (NP=2 (NP-TMP (NN today) ) (SBAR (-NONE- 0) ) ) )
    (, ,) (. .) ))
( (FRAG (-LRB- -LRB-) (NP (NNP Yes) ) (-RRB- -RRB-) ) )
"""


def test_read_and_clean_hand_tree():
    trees = read_trees(HAND)
    assert len(trees) == 2 and trees[0][0] == "" and trees[0][1][0][0] == "S"
    tree = clean_tree(trees[0])
    # the empty NP, the SBAR whose S holds only a trace, and the SBAR of a bare 0 are all gone
    assert tree == ("", [("S", [
        ("NP", [("PRP$", ["Our"]), ("NN", ["dog"])]),
        ("VP", [("VBD", ["barked"]), ("NP", [("NP", [("NN", ["today"])])])]),
        (",", [","]), (".", ["."]),
    ])])
    assert pos_sequence(tree) == ["PRP$", "NN", "VBD", "NN", ",", "."]
    prods = productions(tree)
    assert ("NP", (("N", "NP"),)) not in prods                     # unit self-loop left out
    assert ("NP", (("N", "NP"),)) in productions(tree, raw=True)
    assert ("VP", (("T", "VBD"), ("N", "NP"))) in prods
    assert ("", (("N", "S"),)) in prods
    assert not any(lab in ("-NONE-", "SBAR") for _, rhs in prods for _, lab in rhs)
    assert pos_sequence(clean_tree(trees[1])) == ["-LRB-", "NNP", "-RRB-"]
    assert clean_tree(read_trees("( (NP (-NONE- *) ) )")[0]) is None


def test_read_trees_errors():
    with pytest.raises(ValueError, match="unbalanced"):
        read_trees("( (NP (NN x) )))")
    with pytest.raises(ValueError, match="left open"):
        read_trees("( (NP (NN x) )")


def test_induce_on_hand_folder(tmp_path):
    folder = tmp_path / "treebank" / "combined"
    folder.mkdir(parents=True)
    (folder / "b.mrg").write_text("( (S (NP (WP$ whose) (NNS cats) ) (VP (VBP purr) ) ) )\n")
    (folder / "a.mrg").write_text(HAND)
    text, st = induce_treebank_grammar(tmp_path, n_trees=3)
    assert st["trees"] == 3 and st["n_files"] == 2 and st["files"] == ["a.mrg", "b.mrg"]
    assert "start: frag\n    | s\n" in text
    for line in ('PRP_S: "PRP$"', 'WP_S: "WP$"', 'COMMA: ","', 'PERIOD: "."', 'LRB: "-LRB-"', 'RRB: "-RRB-"',
                 "frag: LRB np RRB", "np: NN\n", "s: np vp\n    | np vp COMMA PERIOD", '%ignore " "'):
        assert line in text, line
    assert "NONE" not in text and "sbar" not in text
    assert st["self_loops_removed"] == 1
    rec = SpanRecognizer(text)
    assert rec.accepts("PRP$ NN VBD NN , .") and rec.accepts("WP$ NNS VBP") and rec.accepts("-LRB- NNP -RRB-")
    assert not rec.accepts("PRP$ NN VBD NN ,") and not rec.accepts("NNS VBP")
    with pytest.raises(ValueError, match="only 3 trees"):
        induce_treebank_grammar(tmp_path, n_trees=4)
    with pytest.raises(DataMissing, match="treebank"):
        induce_treebank_grammar(tmp_path / "nowhere")


# --------------------------------------------------------------------------------------------------
# The real grammar (needs the data)
# --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def treebank(data_root):
    if not (data_root / "treebank" / "combined").exists():
        pytest.skip(f"no treebank/combined under {data_root}")
    return load_treebank(data_root)


@pytest.fixture(scope="module")
def recognizer(treebank):
    return SpanRecognizer(treebank.grammar.lark)


@pytest.mark.data
def test_induction_deterministic(data_root, treebank):
    _induce.cache_clear()
    first, st1 = induce_treebank_grammar(data_root)
    _induce.cache_clear()
    second, st2 = induce_treebank_grammar(str(data_root) + "/")
    assert first == second and st1 == st2
    assert first.encode() == treebank.grammar.lark.encode()
    assert induce_treebank_grammar(data_root)[0] is second     # cached


@pytest.mark.data
def test_counts_and_samples(data_root, treebank):
    m = treebank.meta
    assert treebank.name == "treebank" and treebank.grammar.name == "treebank" and treebank.grammar.start == "start"
    assert m["trees"] == 300 and m["files"] == ["wsj_0001.mrg", "wsj_0029.mrg"]
    # the data README's counts: 1,335 raw-label and 768 stripped productions (root wrapper and -NONE- included);
    # dropping -NONE- and emptied constituents merges/removes some, and 2 self-loops X -> X go
    assert m["productions_raw_labels"] == 1335 and m["productions_stripped"] == 768
    assert (m["productions"], m["rules"], m["nonterminals"], m["terminals"]) == (749, 21, 20, 39)
    assert m["self_loops_removed"] == 2 and m["start_alternatives"] == 3
    assert (m["sample_len_mean"], m["sample_len_min"], m["sample_len_max"]) == (23.65, 4, 58)
    text = treebank.grammar.lark
    assert text.count("\n    | ") + m["rules"] == m["productions"]
    assert text.startswith("// Induced") and "start: frag\n    | s\n    | sinv\n" in text
    assert 'PRP_S: "PRP$"' in text and 'LQUOTE: "``"' in text and "RQUOTE: \"''\"" in text
    ids = [s.id for s in treebank.samples]
    assert ids == [f"tb-{i:03d}" for i in range(300)]
    assert treebank.samples[0].text == "NNP NNP , CD NNS JJ , MD VB DT NN IN DT JJ NN NNP CD ."
    assert all("-NONE-" not in s.text and "  " not in s.text for s in treebank.samples)
    picked = load_treebank(data_root, n=10, seed=3)
    assert len(picked.samples) == 10 and [s.id for s in picked.samples] == sorted(s.id for s in picked.samples)


@pytest.mark.data
@pytest.mark.slow
def test_all_samples_recognised(treebank, recognizer):
    rejected = [s.id for s in treebank.samples if not recognizer.accepts(s.text)]
    assert rejected == []


@pytest.mark.data
def test_mutations_rejected(treebank, recognizer):
    words = [s.text.split() for s in treebank.samples]
    rng = random.Random(0)
    shuffled = []
    for w in words[:100]:
        v = w[:]
        rng.shuffle(v)
        shuffled.append(" ".join(v))
    # the grammar is permissive: 39 of these 100 shuffles pass, most sentences minus their last tag or first tag
    # pass too (an embedded S needs no '.'), and even without 'start: s' most samples parse via 'sinv: vp np'
    assert sum(recognizer.accepts(x) for x in shuffled) <= 50
    assert not any(recognizer.accepts(" ".join(w[::-1])) for w in words[:40])
    assert not any(recognizer.accepts(" ".join(w[-1:] + w[:-1])) for w in words[:40])   # '.' moved first
    for bad in ("", "XX", "-NONE-", "DT NN -NONE- VBZ .", "PRP $ NN"):
        assert not recognizer.accepts(bad), bad


@pytest.mark.data
def test_recognizer_agrees_with_reference_checker(treebank, recognizer):
    from gcdbench.parsers.reference import ReferenceChecker

    ref = ReferenceChecker(treebank.grammar)
    rng = random.Random(1)
    cases = []
    for s in treebank.samples:
        w = s.text.split()
        if len(w) <= 7:
            v = w[:]
            rng.shuffle(v)
            cases += [s.text, " ".join(v), " ".join(w[:-1]), " ".join(w[1:])]
    assert len(cases) >= 20
    got = [recognizer.accepts(x) for x in cases]
    assert got == [ref.is_sentence(x.encode()) for x in cases]
    assert any(got) and not all(got)


# --------------------------------------------------------------------------------------------------
# Embedded POS sample (no data needed)
# --------------------------------------------------------------------------------------------------
def test_sample_pos_recognised_and_ambiguous():
    ds = load_sample_pos()
    assert ds.name == "sample_pos" and ds.grammar.name == "sample_pos" and len(ds.samples) == 30
    assert ds.samples[0].id == "pos-0000"
    parser = lark.Lark(ds.grammar.lark, parser="earley", lexer="basic", ambiguity="explicit")
    rec = SpanRecognizer(ds.grammar.lark)
    n_ambiguous = 0
    for s in ds.samples:
        tree = parser.parse(s.text)
        n_ambiguous += any(True for _ in tree.find_data("_ambig"))
        assert rec.accepts(s.text), s.id
    assert n_ambiguous >= 10
    for bad in ("DT NN", "DT VBZ .", "VBD DT NN .", "DT NN VBZ . .", "PRP VBD DT NN IN ."):
        assert not rec.accepts(bad), bad
        with pytest.raises(lark.exceptions.LarkError):
            parser.parse(bad)
    assert len(load_sample_pos(n=5, seed=1).samples) == 5


def test_sample_pos_terminals_match_treebank_style():
    text = load_sample_pos().grammar.lark
    assert 'PRP_S: "PRP$"' in text and 'COMMA: ","' in text and 'PERIOD: "."' in text and '%ignore " "' in text

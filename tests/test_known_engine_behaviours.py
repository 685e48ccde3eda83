"""Engine behaviours that the off-gold audit found (README "Known engine behaviours"), pinned here so that a test
fails when an engine changes them (then README, configs and report notes need a new look).

LLGuidance's forced-byte fast-forward: where the grammar leaves one way to go on (after ``f`` of JSON's
``false``: ``alse``), LLGuidance by default allows only the token its tokenizer produces for those bytes, so with
a real vocabulary its mask is narrower than the language's. ``forcing=false`` (config ``llguidance_unforced``)
turns that off; its masks are then the language's.

XGrammar's UTF-8: inside a JSON string it allows the bytes A0-BF after ED, which spell the UTF-16 surrogates
U+D800-U+DFFF (not UTF-8: RFC 3629 section 3); the reference and the other engines allow only 80-9F there.

The native JSON Schema compilers (found by the MaskBench audit): LLGuidance's blocks U+007F and the escape ``\\/``
inside strings; XGrammar's strict mode closes objects, and it allows raw control bytes in length-bounded strings.
"""
from __future__ import annotations

import pytest

from gcdbench.datasets.base import load_grammar
from gcdbench.experiments.audit import Auditor
from gcdbench.parsers.base import CompileError, GrammarSpec, allocate_mask, mask_to_ids
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


# --------------------------------------------------------------------------------------------------------------
# LLGuidance's regex classes: Rust's regex crate (issue 27), over every code point each class touches
# --------------------------------------------------------------------------------------------------------------
def _walk_utf8(allowed) -> set:
    """The code points whose UTF-8 bytes a one-character language accepts, from ``allowed(prefix)``: the set of
    next bytes that keep ``prefix`` viable (every lead byte, then every continuation byte it allows); a sequence
    that is not UTF-8 is kept as its bytes."""
    from gcdbench.parsers.regex_fsm import utf8_len

    out = set()

    def go(prefix: bytes, need: int):
        for b in allowed(prefix):
            data = prefix + bytes([b])
            n = need or utf8_len(b) or 1
            if len(data) == n:
                try:
                    out.add(ord(data.decode("utf-8")))
                except UnicodeDecodeError:   # not UTF-8 (an encoded surrogate): kept as its bytes
                    out.add(data)
            elif b >= 0xC0 or prefix:
                go(data, n)

    go(b"", 0)
    return out


def _class_walks(name: str, cls: str, tok, ignore_case: bool = False, **options) -> tuple[set, set]:
    """(what engine ``name`` accepts, what the reference's reading under its declared profile accepts) for the
    one-character terminal ``/cls/`` (``/cls/i`` with ``ignore_case``), each walked over every UTF-8 sequence it
    allows."""
    from gcdbench.parsers.regex_fsm import byte_dfa

    byte_id = {b[0]: i for i, b in enumerate(tok.token_bytes) if len(b) == 1}
    engine = engine_class(name)(**options)
    engine.compile(GrammarSpec("cls", f"start: C\nC: /{cls}/{'i' if ignore_case else ''}\n"), tok)
    prof = engine.profile()
    mask = allocate_mask(tok.vocab_size)

    def engine_allowed(prefix: bytes):
        engine.reset()
        for b in prefix:
            assert engine.commit(byte_id[b])
        engine.fill_mask(mask)
        return sorted(tok.token_bytes[i][0] for i in mask_to_ids(mask, tok.vocab_size) if len(tok.token_bytes[i]) == 1)

    dfa = byte_dfa("C", cls, ignore_case, prof.case_fold, prof.regex_classes)

    def dfa_allowed(prefix: bytes):
        q = dfa.start
        for b in prefix:
            q = dfa.step(q, b)
        return [b for b in range(256) if dfa.step(q, b) >= 0]

    got, want = _walk_utf8(engine_allowed), _walk_utf8(dfa_allowed)
    engine.close()
    assert len(want) > 9   # the walk reached the class
    return got, want


def _show(got: set, want: set) -> str:
    key = lambda c: c if isinstance(c, int) else -1   # noqa: E731
    fmt = lambda c: hex(c) if isinstance(c, int) else c.hex()   # noqa: E731
    return (f"engine only: {[fmt(c) for c in sorted(got - want, key=key)[:20]]}, "
            f"profile only: {[fmt(c) for c in sorted(want - got, key=key)[:20]]}")


@pytest.mark.slow
@pytest.mark.parametrize("cls", [r"\s", r"\w", r"\d", r".", r"[^\s\d]"])
def test_llguidance_reads_regex_classes_as_its_declared_profile(bytes_tokenizer, cls):
    r"""Every code point LLGuidance accepts for a one-character terminal ``/cls/`` is the set the reference's
    reading under LLGuidance's declared profile (``regex_classes="uts18"``) gives, exactly: walked over every
    UTF-8 byte sequence the class allows (about 22,000 masks for a negated class). Negation is walked once, on
    ``[^\s\d]`` (``.`` walks every code point); ``\S \W \D``, 100 s more of the suite, are its complements of
    classes walked here."""
    got, want = _class_walks("llguidance", cls, bytes_tokenizer, forcing=False)
    assert got == want, _show(got, want)


#: what an engine's reading of a class differs in from its declared profile (README "Known engine behaviours")
CLASS_FINDINGS = {
    # kbnf's '.' leaves out the noncharacters U+FFFF and U+10FFFF
    ("kbnf", "."): (set(), {0xFFFF, 0x10FFFF}),
    # XGrammar's '.' takes ED A0-BF xx, the UTF-8 form of the surrogates U+D800-U+DFFF (not UTF-8)
    ("xgrammar", "."): ({bytes([0xED, b2, b3]) for b2 in range(0xA0, 0xC0) for b3 in range(0x80, 0xC0)}, set()),
    # CFGzip compiles through XGrammar's grammar compiler: the same
    ("cfgzip", "."): ({bytes([0xED, b2, b3]) for b2 in range(0xA0, 0xC0) for b3 in range(0x80, 0xC0)}, set()),
    # GLRMask folds with the Turkic entries of CaseFolding.txt (status T) besides C and S: U+0130 (dotted capital
    # I) matches a class holding i, U+0131 (dotless i) one holding I
    ("glrmask", "fold:lower"): ({0x130}, set()),
    ("glrmask", "fold:upper"): ({0x131}, set()),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["xgrammar", "glrmask", "kbnf", "valiant", "psc", "pre3", "cfgzip"])
@pytest.mark.parametrize("cls", [r"\s", r"\w", r"\d", r"."])
def test_every_engine_reads_regex_classes_as_its_declared_profile(bytes_tokenizer, name, cls):
    """Issue 27: each engine's reading of ``\\s \\w \\d .``, over every code point the class touches, equals its
    declared profile's, except the differences found and pinned in CLASS_FINDINGS (a change there fails too)."""
    got, want = _class_walks(name, cls, bytes_tokenizer)
    engine_only, profile_only = CLASS_FINDINGS.get((name, cls), (set(), set()))
    assert (got - want, want - got) == (engine_only, profile_only), _show(got, want)


def _cased_class(side: str) -> str:
    """A regex class of every code point that is its own lower case and has another case (``side="lower"``), or
    is its own upper case and has a lower case (``"upper"``), as ranges: under ``/.../i`` each engine must add
    the other case of every member, exactly as its declared ``case_fold`` says (title case, Kelvin sign, long s,
    final sigma, Turkic i and the rest come only from folding)."""
    def keep(c: str) -> bool:
        if side == "lower":
            return c.lower() == c and (c.upper() != c or c.casefold() != c)
        return c.upper() == c and c.lower() != c

    ranges: list[list[int]] = []
    for c in range(0x110000):
        if 0xD800 <= c < 0xE000 or not keep(chr(c)):
            continue
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    esc = lambda c: f"\\U{c:08x}" if c > 0xFFFF else f"\\u{c:04x}"   # noqa: E731
    return "[" + "".join(esc(a) if a == b else f"{esc(a)}-{esc(b)}" for a, b in ranges) + "]"


ALL_ENGINES = ["xgrammar", "llguidance", "glrmask", "kbnf", "valiant", "psc", "pre3", "cfgzip"]


@pytest.mark.parametrize("name", ALL_ENGINES)
@pytest.mark.parametrize("side", ["lower", "upper"])
def test_every_engine_folds_case_as_its_declared_profile(bytes_tokenizer, name, side):
    """Issue 27: case folding walked over every code point it touches. ``/[all lower-case letters]/i`` and
    ``/[all upper-case letters]/i`` (about 1,450 code points each; 2,800-2,900 after folding) accept exactly what
    the reference reads under the engine's declared ``case_fold``, except the findings pinned in CLASS_FINDINGS."""
    options = {"forcing": False} if name == "llguidance" else {}
    got, want = _class_walks(name, _cased_class(side), bytes_tokenizer, ignore_case=True, **options)
    assert len(want) > 2000
    engine_only, profile_only = CLASS_FINDINGS.get((name, f"fold:{side}"), (set(), set()))
    assert (got - want, want - got) == (engine_only, profile_only), _show(got, want)


@pytest.mark.parametrize("name", ["reference", *ALL_ENGINES])
@pytest.mark.parametrize("terminal", [r"/a\b./", r"/a\B./", r"/a\b/"])
def test_no_engine_reads_word_boundaries_and_each_says_so(bytes_tokenizer, name, terminal):
    """Issue 27's ``\\b``: no engine implements a word boundary inside a terminal (LLGuidance: "lookarounds not
    supported"; the EBNF converters and the reference's automaton have no zero-width constructs), so there is no
    language to walk. Each refuses the grammar with a typed CompileError naming the construct, never a crash
    or a silently different language; the runner records that as compile_error."""
    engine = engine_class(name)(**({"forcing": False} if name == "llguidance" else {}))
    with pytest.raises(CompileError) as err:
        engine.compile(GrammarSpec("wb", f"start: C D?\nC: {terminal}\nD: /./\n"), bytes_tokenizer)
    assert "word boundary" in str(err.value) or "lookarounds not supported" in str(err.value), str(err.value)


def test_llguidance_agrees_with_its_profile_on_unicode_space_and_word_classes(bytes_tokenizer):
    """Issue 27's held-out check: with ``%ignore /\\s+/`` and ``/\\w+/`` words, LLGuidance agreed with its declared
    profile on 17 of 69 audited steps (it blocks U+001C-U+001F, which Python's ``\\s`` takes; it allows combining
    marks in words, which Python's ``\\w`` does not). With ``regex_classes="uts18"`` in its profile: every step."""
    tok = bytes_tokenizer
    grammar = GrammarSpec("words", 'start: WORD ("," WORD)*\nWORD: /\\w+/\n%ignore /\\s+/\n')
    engine = engine_class("llguidance")(forcing=False)
    engine.compile(grammar, tok)
    auditor = Auditor(grammar, tok, engine.profile())
    mask = allocate_mask(tok.vocab_size)
    text = "cafe\u0301 ,\u3000na\u00efve,\x85x1 \u2028, \u0663\u0664"   # ASCII space ends x1: see README on byte-level munch
    rows = []
    engine.reset()
    for i, t in enumerate(tok.encode(text) + [None]):
        engine.fill_mask(mask)
        rows.append(auditor.compare(tok.decode(tok.encode(text)[:i]), mask_to_ids(mask, tok.vocab_size)))
        if t is not None:
            assert engine.commit(t), (i, text)
    engine.close()
    assert all(r["agree_profile"] for r in rows), [(i, r) for i, r in enumerate(rows) if not r["agree_profile"]][:3]
    assert not all(r["agree_language"] for r in rows)   # the classes do differ from Python's on this text


# --------------------------------------------------------------------------------------------------------------
# The native JSON Schema compilers (xgrammar_schema, llguidance_schema), as the MaskBench run's audit found them
# --------------------------------------------------------------------------------------------------------------
def _schema_masks(tok, name: str, schema: dict, prefixes: list[bytes], **options) -> dict:
    """For each prefix: (bytes the native schema compiler allows next, bytes the converter's language allows)."""
    import json

    from gcdbench.parsers.jsonschema.convert import schema_to_lark

    grammar = GrammarSpec("s", schema_to_lark(schema), json_schema=json.dumps(schema))
    engine = engine_class(name)(grammar_form="json_schema", **options)
    engine.compile(grammar, tok)
    auditor = Auditor(grammar, tok, engine.profile())
    mask = allocate_mask(tok.vocab_size)
    byte_of = {i: b[0] for i, b in enumerate(tok.token_bytes) if len(b) == 1}
    out = {}
    for prefix in prefixes:
        engine.reset()
        for b in prefix:
            assert engine.commit(b), (name, prefix)
        engine.fill_mask(mask)
        got = {byte_of[i] for i in mask_to_ids(mask, tok.vocab_size).tolist() if i in byte_of}
        want = {byte_of[i] for i in auditor.reference_ids(prefix).tolist() if i in byte_of}
        out[prefix] = (got, want)
    engine.close()
    return out


def test_llguidance_schema_blocks_del_and_the_escaped_solidus_in_strings(bytes_tokenizer):
    """RFC 8259 lets a string hold U+007F raw and spell '/' as the escape \\/; LLGuidance's own schema compiler
    allows neither (every disagreeing step of the committed llguidance_schema cell is one of these two)."""
    rows = _schema_masks(bytes_tokenizer, "llguidance", {"type": "string"}, [b'"', b'"\\', b'"a'], forcing=False)
    for prefix, (got, want) in rows.items():
        if prefix == b'"\\':
            assert ord("/") in want and ord("/") not in got and got == want - {ord("/")}, prefix
        else:
            assert 0x7F in want and 0x7F not in got and got == want - {0x7F}, (prefix, sorted(got ^ want))


def test_xgrammar_schema_allows_raw_control_characters_in_length_bounded_strings(bytes_tokenizer):
    """A string with minLength/maxLength: XGrammar's schema compiler allows the raw bytes 00-1F but LF and CR inside
    it (RFC 8259 says they must be escaped) and no escape at all (``\\`` blocked); a plain string it reads as the
    language does."""
    bounded = {"type": "string", "minLength": 1, "maxLength": 8}
    (got, want), = _schema_masks(bytes_tokenizer, "xgrammar", bounded, [b'"']).values()
    raw = set(range(0x20)) - {0x0A, 0x0D}
    assert got - want == raw and want - got == {ord("\\")}, (sorted(got - want), sorted(want - got))
    (got, want), = _schema_masks(bytes_tokenizer, "xgrammar", {"type": "string"}, [b'"']).values()
    assert got == want


def test_xgrammar_schema_strict_mode_closes_objects(bytes_tokenizer):
    """XGrammar's default strict_mode (json_strict=true, the preset's) allows no key a schema does not list, where
    JSON Schema's default additionalProperties is true; json_strict=false follows the spec."""
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    for strict in (True, False):
        (got, want), = _schema_masks(bytes_tokenizer, "xgrammar", schema, [b'{"'], json_strict=strict).values()
        assert ord("b") in want and (ord("b") in got) is not strict and ord("a") in got, (strict, sorted(got ^ want))

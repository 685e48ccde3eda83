"""transformers-cfg (PyPI ``transformers-cfg``, optional extra ``transformers-cfg``) behind the engine interface.

transformers-cfg is the EBNF logits processor for Hugging Face models: a port of llama.cpp's grammar sampler to
Python (a set of parse stacks advanced per character, recursive descent, no left recursion). The grammar is
its EBNF dialect (llama.cpp's GBNF), written from the project's ``.lark`` source by the GBNF converter of
:mod:`gcdbench.parsers.convert_dialects` (scannerless, ``%ignore``d text inlined after every terminal: the
reference's language) with one change: character classes are always written as their code-point ranges, since
the dialect's ``[^...]`` only complements within U+0000-U+00FF.

The mask is the engine's own token-level path (``IncrementalTokenRecognizer.filter_vocab``), run over a
:class:`~transformers_cfg.tokenization.byte_trie.ByteTrie` of the harness vocabulary's bytes instead of a
Hugging Face tokenizer (its tokenizer classes decode tokens to text, which mangles partial UTF-8 tokens); a
commit is its ``try_accept_token_id`` then ``_update_state_with_token_id``. Special and padding ids are not
in the trie, so they are never allowed; EOS is allowed when a parse stack is empty.

Known differences from the reference, all in transformers-cfg itself (``recognizer.py``,
``token_grammar_recognizer.py``):

* its mask walk has two paths, chosen by whether the grammar *text* has a non-ASCII character (option
  ``mask_path=auto``): the byte path reads every byte of a token as a code point of its own (a token with a
  multi-byte character is checked byte by byte against the classes), the unicode path decodes UTF-8 but
  restarts from the stack for every trie node; commits always decode UTF-8, so a token the byte path allowed
  may be refused on commit. The byte path's reading is declared (``profile()``: ``token_bytes="latin1"``, which
  the reference executes); the byte path also forgets a partial character a commit left pending (not declared);
* a NUL character is never accepted on commit;
* left recursion would recurse forever in its stack expansion: refused at compile (CompileError naming the
  rules); ambiguity multiplies its parse stacks (no limit of its own: the runner's limits apply).
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import numpy as np

from gcdbench.parsers.base import CompileError, Engine, EngineError, GrammarSpec, Profile, option

MISSING = ("engine transformers_cfg needs transformers-cfg: pip install -e \".[transformers-cfg]\" "
           "(README 'Other engines')")


def lark_to_tcfg(spec: GrammarSpec) -> str:
    """transformers-cfg EBNF for ``spec`` (root rule ``root``): the GBNF converter with positive classes only."""
    from gcdbench.parsers import convert_dialects as cd
    from gcdbench.parsers.charsets import complement

    class _Positive(cd.GBNF):
        def cls(self, ranges, neg):
            return super().cls(list(complement(ranges)) if neg else list(ranges), False)

    ir = cd.load_ir(spec)
    d = _Positive()
    ws = " ws" if ir.ignore else ""

    def literal(token):
        regex, icase = cd._literal_regex(token)
        return f"{d.group(cd._RegexWriter(str(token), icase, d)(regex))}{ws}"

    conv = cd._TreeWriter(d, literal)
    lines = [f"root ::= {d.name(spec.start, False)}"]
    lines += [f"{d.name(name, False)} ::= {conv(tree)}" for name, tree in cd._rule_defs(spec)]
    for t in sorted(conv.used):
        term = ir.terminals[t]
        lines.append(f"{d.name(t, True)} ::= {d.group(cd._RegexWriter(t, term.ignore_case, d)(term.regex))}{ws}")
    if ir.ignore:
        pieces = [d.group(cd._RegexWriter(t, ir.terminals[t].ignore_case, d).ignore_piece(ir.terminals[t].regex))
                  for t in ir.ignore]
        lines.append(f"ws ::= {d.rep(d.alt(pieces), 0, None)}")
    return "\n".join(lines) + "\n"


def _elements(alternative) -> list:
    return [e for sym in alternative.symbols for e in sym] + list(alternative.buffer_elements)


def check_parsed(state, root: str = "root") -> None:
    """Refuse what transformers-cfg cannot run: an unparsed grammar, undefined rules, left recursion."""
    from transformers_cfg.parser import ReferenceElement

    if root not in state.symbol_table:
        raise CompileError("transformers-cfg could not parse the converted grammar (its parser logs the reason and "
                           "returns an empty grammar)")
    names = {i: n for n, i in state.symbol_table.items()}
    undefined = sorted(names[i] for i in names if i not in state.grammar_rules)
    if undefined:
        raise CompileError(f"transformers-cfg: rules used but not defined: {undefined[:10]}")
    rules = {i: [_elements(a) for a in r.alternatives] for i, r in state.grammar_rules.items()}
    nullable: set[int] = set()
    changed = True
    while changed:
        changed = False
        for i, alts in rules.items():
            if i not in nullable and any(all(isinstance(e, ReferenceElement) and e.referee_id in nullable
                                             for e in alt) for alt in alts):
                nullable.add(i)
                changed = True
    corner: dict[int, set[int]] = {i: set() for i in rules}
    for i, alts in rules.items():
        for alt in alts:
            for e in alt:
                if not isinstance(e, ReferenceElement):
                    break
                corner[i].add(e.referee_id)
                if e.referee_id not in nullable:
                    break
    # a rule reachable from itself through left corners recurses forever in expand_stack_head
    state_of = {i: 0 for i in rules}   # 0 new, 1 on the path, 2 done
    for top in rules:
        if state_of[top]:
            continue
        path, stack = [top], [iter(sorted(corner[top]))]
        state_of[top] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state_of[path.pop()] = 2
                stack.pop()
            elif state_of[nxt] == 1:
                cycle = path[path.index(nxt):] + [nxt]
                raise CompileError("transformers-cfg cannot take left recursion (its recursive descent would not "
                                   f"end): {' -> '.join(names.get(c, str(c)) for c in cycle)}")
            elif state_of[nxt] == 0:
                state_of[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(corner[nxt])))


class _Vocabulary:
    """The harness vocabulary where transformers-cfg expects a tokenizer and its byte mapping."""

    def __init__(self, tokenizer):
        self.eos_token_id = tokenizer.eos_id
        self.bos_token_id = None
        self.token_bytes = tokenizer.token_bytes
        self._length = tokenizer.vocab_size

    def __len__(self):
        return self._length

    def map(self, token_id: int, verbose=False) -> bytes:
        return self.token_bytes[int(token_id)]


@dataclass
class TransformersCfgOptions:
    mask_path: str = option("auto", "the mask walk: auto (transformers-cfg's own choice: unicode iff the grammar text "
                       "has a non-ASCII character; the converter escapes them, so bytes), bytes, unicode",
                       choices=("auto", "bytes", "unicode"))
    max_cached_masks: int = option(1024, "entries of transformers-cfg's per-stack mask cache (an lru_cache of one "
                                   "vocabulary-wide tensor each; its own limit, 32768, is GBs at Qwen3's width) "
                                   "before it is cleared; it is also cleared at reset")


class TransformersCfgEngine(Engine):
    name = "transformers_cfg"
    plot_style = ("#86b6f0", "P")   # light blue, in every figure
    artifact_keys = {"EBNF chars": ("grammar_chars",)}
    Options = TransformersCfgOptions

    @classmethod
    def missing(cls) -> str | None:
        return MISSING if importlib.util.find_spec("transformers_cfg") is None else None

    def version(self) -> str:
        import importlib.metadata

        return importlib.metadata.version("transformers-cfg")

    @classmethod
    def complexity(cls, ambiguous: bool = False) -> str:
        return "O(exp n)" if ambiguous else "O(n)"   # parse stacks, as llama.cpp's

    def profile(self) -> Profile:
        """The byte path's reading (each byte of a candidate token one code point) as ``token_bytes="latin1"``;
        with ``mask_path=auto`` the compiled grammar decides (before a compile: the converter's ASCII text, bytes)."""
        path = self.opts["mask_path"]
        if getattr(self, "rec", None) is not None:
            path = "unicode" if self.rec.use_unicode else "bytes"
        return Profile() if path == "unicode" else Profile(token_bytes="latin1")

    def compile(self, grammar: GrammarSpec, tokenizer) -> None:
        import torch
        from transformers_cfg.parser import parse_ebnf
        from transformers_cfg.token_grammar_recognizer import IncrementalTokenRecognizer
        from transformers_cfg.tokenization.byte_trie import ByteTrie

        self.source = lark_to_tcfg(grammar)
        check_parsed(parse_ebnf(self.source))
        vocab = _Vocabulary(tokenizer)
        special = set(tokenizer.special_ids.values())
        trie = ByteTrie()
        for i, b in enumerate(tokenizer.token_bytes):
            if b and i not in special:
                trie.insert(b, i)
        trie.vocab_size = tokenizer.vocab_size
        try:
            self.rec = IncrementalTokenRecognizer(self.source, "root", vocab, trie=trie, homomorphism=vocab)
        except (RuntimeError, ValueError, KeyError, IndexError, RecursionError) as err:
            raise CompileError(f"transformers-cfg refused the grammar: {type(err).__name__}: {err}") from err
        if self.opts["mask_path"] != "auto":
            self.rec.use_unicode = self.opts["mask_path"] == "unicode"
        self.device = torch.device("cpu")
        self.vocab_size = tokenizer.vocab_size
        self.eos_id = tokenizer.eos_id
        self.reset()

    def _cache(self):
        return type(self.rec).get_next_token_acceptance_for_single_stack

    def reset(self) -> None:
        self._cache().cache_clear()
        self.state = self.rec.string_recognizer.get_initial_parsing_state()

    def fill_mask(self, out: np.ndarray) -> None:
        cache = self._cache()
        if cache.cache_info().currsize > self.opts["max_cached_masks"]:
            cache.cache_clear()
        try:
            allowed = self.rec.filter_vocab(self.state, self.device).numpy()
        except RecursionError as err:
            raise EngineError(f"transformers-cfg: recursion limit in its stack expansion ({err})") from err
        bits = np.zeros(out.shape[0] * 32, dtype=bool)
        bits[: min(len(allowed), self.vocab_size)] = allowed[: self.vocab_size]
        out[:] = np.packbits(bits, bitorder="little").view(np.int32)

    def commit(self, token_id: int) -> bool:
        t = int(token_id)
        try:
            if not self.rec.try_accept_token_id(t, self.state):
                return False
            self.state = self.rec._update_state_with_token_id(t, self.state)
        except RecursionError as err:
            raise EngineError(f"transformers-cfg: recursion limit in its stack expansion ({err})") from err
        except ValueError:
            return False
        return True

    def fork(self) -> "TransformersCfgEngine":
        import copy

        other = copy.copy(self)
        other.state = self.rec.string_recognizer.get_initial_parsing_state()
        return other

    def info(self) -> dict:
        return {"grammar_form": "transformers-cfg ebnf", "grammar_chars": len(self.source),
                "mask_path": "unicode" if self.rec.use_unicode else "bytes"}

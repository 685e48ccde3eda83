"""LLGuidance (PyPI ``llguidance``) behind the engine interface.

The ``.lark`` source goes in as is (LLGuidance reads Lark syntax). LLGuidance lexes with longest match
among the lexemes the parser allows, so its language can differ from the scannerless reference where one
terminal's match extends another's (see README "Lexing differences"). Its parser has work limits; they are
options here so a run can raise them (TreeBank needs that) and a hit limit is a recorded outcome. Where the
grammar forces the next bytes, LLGuidance by default allows only the tokenizer's own token for them (README
"Known engine behaviours"); ``forcing=false`` (config ``llguidance_unforced``) turns that off.

Batch mode: ``fork()`` is a new ``LLMatcher`` over the same grammar and tokenizer; ``fill_masks`` is LLGuidance's
parallel fill (``llguidance.numpy.fill_next_token_bitmask_par`` on an ``LLExecutor`` of ``threads`` threads).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from gcdbench.parsers.base import CompileError, Engine, EngineError, GrammarSpec, Profile, option


def ll_tokenizer(tokenizer):
    """LLGuidance's view of a :class:`~gcdbench.parsers.tokenizers.Tokenizer`, from its tiktoken encoding
    (``llguidance.tiktoken``): same token bytes, specials and padding ids as special tokens, the same EOS.
    Built once per process and vocabulary (about a second for Qwen3)."""

    def build(tk):
        from llguidance.tiktoken import lltokenizer_from_encoding

        return lltokenizer_from_encoding(tk.encoding, n_vocab=tk.vocab_size, eos_token=tk.eos_id)

    return tokenizer.view("llguidance.LLTokenizer", build)


@dataclass
class LLGuidanceOptions:
    step_max_items: int | None = option(None, "parser work limit (LLParserLimits); null: LLGuidance's default")
    max_items_in_row: int | None = option(None, "parser work limit (LLParserLimits); null: LLGuidance's default")
    step_lexer_fuel: int | None = option(None, "parser work limit (LLParserLimits); null: LLGuidance's default")
    initial_lexer_fuel: int | None = option(None, "parser work limit (LLParserLimits); null: LLGuidance's default")
    threads: int = option(1, "batch mode: threads of its parallel mask fill (LLExecutor); batch.threads sets it")
    forcing: bool = option(True, "LLGuidance's default: where the grammar forces the next bytes, only the "
                           "tokenizer's token for them; false: grammar option no_forcing")
    grammar_form: str = option("lark", "lark: the dataset's Lark grammar; json_schema: LLGuidance's own JSON Schema "
                               "compiler on the dataset's schemas (dataset=maskbench)", choices=("lark", "json_schema"))
    json_whitespace: str = option("compact", "grammar_form=json_schema: compact (separators ',' ':', no other whitespace, "
                                  "as dataset.serialize=compact) or flexible (any whitespace)",
                                  choices=("compact", "flexible"))
    json_lenient: bool = option(False, "grammar_form=json_schema: LLGuidance's default refuses a schema with a keyword or "
                                "format it does not implement; true: ignores them (x-guidance lenient)")


class LLGuidanceEngine(Engine):
    name = "llguidance"
    plot_style = ("#ff8c00", "v")   # orange, in every figure
    Options = LLGuidanceOptions
    threads_option = "threads"
    LIMITS = ("step_max_items", "max_items_in_row", "step_lexer_fuel", "initial_lexer_fuel")

    def version(self) -> str:
        import importlib.metadata

        return importlib.metadata.version("llguidance")

    @property
    def reads_json_schema(self) -> bool:
        return self.opts["grammar_form"] == "json_schema"

    def profile(self) -> Profile:
        """A lexer: longest match among the lexemes the parser allows; no ignored text after a sentence that
        no terminal can extend; Unicode simple case folding for ``"..."i``; ``\\s \\w \\d`` as Rust's ``regex``
        crate reads them (Unicode properties: ``\\s`` without U+001C-U+001F, ``\\w`` with combining marks)."""
        if self.reads_json_schema:   # its own JSON grammar: the schema's language, read as the converter defines it
            return Profile()
        return Profile(lexing="longest_match", trailing_ignore=False, case_fold="unicode_simple", regex_classes="uts18")

    @classmethod
    def complexity(cls, ambiguous: bool = False) -> str:
        """Earley parsing over a lexer: linear on the unambiguous grammars, cubic on highly ambiguous ones."""
        return "O(n^3)" if ambiguous else "O(n)"

    def compile(self, grammar: GrammarSpec, tokenizer) -> None:
        import llguidance

        if self.reads_json_schema:
            text = self._schema_grammar(grammar)
        else:
            text = grammar.lark
            if grammar.start != "start":
                text = f"start: {grammar.start}\n" + text
        if not self.opts["forcing"]:
            # Where the grammar forces the next bytes (after "f" of JSON's "false": "alse"), LLGuidance by default
            # allows only the token its tokenizer would produce for them ("alse"; not "a", "al"), so the mask is
            # narrower than the language's (llguidance#263). The grammar option no_forcing turns that off.
            text = '%llguidance { "no_forcing": true }\n' + text
        grm = llguidance.LLMatcher.grammar_from_lark(text)
        ll_tok = ll_tokenizer(tokenizer)
        is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grm, ll_tok)
        if is_error:
            raise CompileError(f"llguidance refused the grammar: {'; '.join(messages)}")
        if int(self.opts["threads"]) < 1:
            raise ValueError(f"engine llguidance: threads must be >= 1, not {self.opts['threads']}")
        limits = llguidance.LLParserLimits(**{k: int(self.opts[k]) for k in self.LIMITS if self.opts[k] is not None})
        self._args = (ll_tok, grm)
        self._limits = limits
        self.matcher = llguidance.LLMatcher(ll_tok, grm, limits=limits)
        if self.matcher.is_error():
            raise CompileError(f"llguidance: {self.matcher.get_error()}")
        self._fill = __import__("llguidance.numpy", fromlist=["fill_next_token_bitmask"]).fill_next_token_bitmask
        self._buf = np.zeros((1, (tokenizer.vocab_size + 31) // 32), dtype=np.int32)

    def _schema_grammar(self, grammar: GrammarSpec) -> str:
        """The schema as LLGuidance's Lark (``start: %json {...}``), so the forcing option applies as for Lark; its
        separators and whitespace from ``json_whitespace`` (``x-guidance``)."""
        import json

        if grammar.json_schema is None:
            raise CompileError(f"llguidance: grammar_form=json_schema needs a JSON Schema, and {grammar.name} is a Lark "
                               "grammar: use a dataset of schemas (dataset=maskbench)")
        schema = json.loads(grammar.json_schema)
        if not isinstance(schema, dict):   # true/false schemas
            schema = {} if schema else {"not": {}}
        flexible = self.opts["json_whitespace"] == "flexible"
        schema = {**schema, "x-guidance": {**schema.get("x-guidance", {}), "whitespace_flexible": flexible,
                                           **({"lenient": True} if self.opts["json_lenient"] else {}),
                                           **({} if flexible else {"item_separator": ",", "key_separator": ":"})}}
        return "start: %json " + json.dumps(schema, ensure_ascii=False) + "\n"

    def reset(self) -> None:
        # a matcher rolls back to its start cheaply; an error in LLGuidance is sticky, so then reset builds a fresh one
        import llguidance

        if self.matcher.is_error() or not self.matcher.reset():
            self.matcher = llguidance.LLMatcher(*self._args, limits=self._limits)

    def fill_mask(self, out: np.ndarray) -> None:
        self._fill(self.matcher, self._buf, 0)
        if self.matcher.is_error():
            raise EngineError(f"llguidance: {self.matcher.get_error()}")
        out[:] = self._buf[0, : out.shape[0]]

    def commit(self, token_id: int) -> bool:
        ok = self.matcher.consume_token(int(token_id))
        if self.matcher.is_error():
            raise EngineError(f"llguidance: {self.matcher.get_error()}")
        return bool(ok)

    # -- batch ------------------------------------------------------------------------------------------
    def fork(self) -> "LLGuidanceEngine":
        """A new matcher over the same grammar and tokenizer, at the empty prefix."""
        import llguidance

        other = type(self)(**self.opts)
        other._args, other._limits, other._fill = self._args, self._limits, self._fill
        other._buf = np.zeros_like(self._buf)
        other.matcher = llguidance.LLMatcher(*self._args, limits=self._limits)
        other._executor = self._exec()
        return other

    def _exec(self):
        if getattr(self, "_executor", None) is None:
            import llguidance

            self._executor = llguidance.LLExecutor(num_threads=int(self.opts["threads"]))
        return self._executor

    def fill_masks(self, seqs: Sequence["LLGuidanceEngine"], out: np.ndarray) -> None:
        """LLGuidance's parallel fill over the sequences' matchers, straight into the rows of ``out``; an error
        state of any matcher is an EngineError (the runner then finds which sequence it was)."""
        from llguidance.numpy import fill_next_token_bitmask_par

        B = len(seqs)
        for s in seqs:
            if getattr(s, "_args", None) is not self._args:
                raise ValueError("llguidance: fill_masks takes this engine and its forks only (one grammar)")
        if out.ndim != 2 or out.shape[0] < B or not out.flags.c_contiguous or out.dtype != np.int32:
            raise ValueError(f"llguidance: out must be a C-contiguous [>= {B}, words] int32 array")
        fill_next_token_bitmask_par(self._exec(), [(s.matcher, i) for i, s in enumerate(seqs)], out[:B])
        for s in seqs:
            if s.matcher.is_error():
                raise EngineError(f"llguidance: {s.matcher.get_error()}")

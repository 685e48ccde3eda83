"""kbnf (PyPI ``kbnf``, the Earley engine behind Formatron) behind the engine interface.

The grammar goes in as KBNF written by :func:`gcdbench.parsers.convert_dialects.lark_to_kbnf`: scannerless,
each terminal one regex (with the ignored text that may follow it), so its language is the reference's.

kbnf ends a sequence as soon as its start symbol is complete ("finished"), which would forbid any text after the
first complete sentence (``SELECT a FROM t`` could not go on with `` WHERE``). So the converted grammar ends with
an end marker, the noncharacter U+10FFFF (UTF-8 ``f4 8f bf bf``), matched nowhere else, and the EOS token is
spelled with it: EOS is allowed exactly when the prefix is a sentence. A token that is a proper prefix of the
marker (the single byte ``f4`` in byte-level vocabularies) would then also be allowed after every sentence, so
such tokens are left out of the main engine and asked of a second kbnf engine over the same grammar that ends
with another noncharacter (U+FFFF) and knows only those few tokens; it follows the same text. Special and
padding ids are in neither vocabulary, so they are never allowed.
"""
from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass

import numpy as np

from gcdbench.parsers.base import CompileError, Engine, EngineError, GrammarSpec, Profile, option

#: kbnf.Config fields the options may set (None keeps kbnf's default), by the attribute path in kbnf.Config
_CONFIG = {
    "cache_enabled": ("engine_config", "cache_enabled"),
    "compaction_enabled": ("engine_config", "compaction_enabled"),
    "rejected_token_prefix_cache_enabled": ("engine_config", "rejected_token_prefix_cache_enabled"),
    "regex_max_memory_usage": ("regex_config", "max_memory_usage"),
    "min_tokens_required_for_eager_regex_cache": ("regex_config", "min_tokens_required_for_eager_regex_cache"),
    "compression_min_terminals": ("compression_config", "min_terminals"),
}


@contextlib.contextmanager
def _quiet_stderr():
    """kbnf's Rust code writes warnings (e.g. bytes no token has) straight to file descriptor 2."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@dataclass
class KbnfOptions:
    """kbnf.Config fields, named as kbnf names them (``_CONFIG`` says where each goes); null: kbnf's own default."""

    cache_enabled: bool | None = option(None, "kbnf engine_config.cache_enabled (its own mask cache, in memory)")
    compaction_enabled: bool | None = option(None, "kbnf engine_config.compaction_enabled")
    rejected_token_prefix_cache_enabled: bool | None = option(None, "kbnf engine_config."
                                                              "rejected_token_prefix_cache_enabled")
    regex_max_memory_usage: int | None = option(None, "kbnf regex_config.max_memory_usage")
    min_tokens_required_for_eager_regex_cache: int | None = option(None, "kbnf regex_config."
                                                                   "min_tokens_required_for_eager_regex_cache")
    compression_min_terminals: int | None = option(None, "kbnf compression_config.min_terminals")


class KbnfEngine(Engine):
    name = "kbnf"
    plot_style = ("#e75fb5", "p")   # pink, in every figure
    artifact_keys = {"KBNF chars": ("grammar_chars",)}

    Options = KbnfOptions

    def version(self) -> str:
        import importlib.metadata

        return importlib.metadata.version("kbnf")

    @classmethod
    def complexity(cls, ambiguous: bool = False) -> str:
        return "O(n^3)"   # Earley recogniser: cubic in the prefix length on ambiguous grammars

    def profile(self) -> Profile:
        return Profile()  # scannerless, ignored text after terminals, Python-re case folds (written out)

    def _config(self):
        import kbnf

        config = kbnf.Config()
        for opt, (section, field) in _CONFIG.items():
            value = self.opts[opt]
            if value is not None:
                part = getattr(config, section)
                setattr(part, field, value)
                setattr(config, section, part)   # the sections are copied out of the Rust struct
        return config

    @staticmethod
    def _vocabulary(items: dict[int, bytes]):
        import kbnf

        return kbnf.Vocabulary({i: kbnf.Token(b) for i, b in items.items()},
                               {i: b.decode("utf-8", "replace") for i, b in items.items()})

    def _build(self, grammar: GrammarSpec, end: int, items: dict[int, bytes]):
        import kbnf

        from gcdbench.parsers.convert_dialects import lark_to_kbnf

        source = lark_to_kbnf(grammar, end)
        try:
            with _quiet_stderr():
                return source, kbnf.Engine(source, self._vocabulary(items), self._config())
        except (ValueError, RuntimeError) as err:
            raise CompileError(f"kbnf refused the grammar: {str(err)[:2000]}") from err

    def compile(self, grammar: GrammarSpec, tokenizer) -> None:
        from gcdbench.parsers.convert_dialects import KBNF_ENDS

        end, other_end = KBNF_ENDS
        marker, other = chr(end).encode(), chr(other_end).encode()
        special = set(tokenizer.special_ids.values())
        text = {i: b for i, b in enumerate(tokenizer.token_bytes) if b and i not in special}
        for b in text.values():
            if marker in b or other in b:
                raise CompileError(f"kbnf: token {b!r} of {tokenizer.name!r} contains an end marker (U+10FFFF, U+FFFF)")
        # tokens that are proper prefixes of the marker go to the second engine (see the module docstring)
        prefixes = {i: b for i, b in text.items() if marker.startswith(b)}
        if any(other.startswith(b) for b in prefixes.values()):
            raise CompileError(f"kbnf: a token of {tokenizer.name!r} is a prefix of both end markers")
        main = {i: b for i, b in text.items() if i not in prefixes}
        main[tokenizer.eos_id] = marker
        self.source, self.engine = self._build(grammar, end, main)
        self.side = self._build(grammar, other_end, prefixes)[1] if prefixes else None
        self.side_ids = sorted(prefixes)
        self.token_bytes = tokenizer.token_bytes
        self.eos_id = tokenizer.eos_id
        self.main_ids = frozenset(main)
        self.vocab_size = tokenizer.vocab_size
        self._setup_buffer()

    def _setup_buffer(self):
        # kbnf writes one bit per id of its vocabulary (ids up to EOS here); the buffer is sized for the whole
        # width so a vocabulary that reaches further still fits
        self._buf = np.zeros(max(self.vocab_size, self.engine.get_vocab().get_vocab_size()), dtype=np.int32)

    def reset(self) -> None:
        self.engine.reset()
        if self.side is not None:
            self.side.reset()

    def fill_mask(self, out: np.ndarray) -> None:
        self.engine.compute_allowed_token_ids()
        self.engine.fill_torch_bitmask(self._buf.ctypes.data)
        out[:] = self._buf[: out.shape[0]]
        if self.side is not None:
            self.side.compute_allowed_token_ids()
            for t in self.side.get_allowed_token_ids_from_last_computation():
                out[t >> 5] |= np.int32(np.uint32(1 << (t & 31)).view(np.int32))

    def commit(self, token_id: int) -> bool:
        t = int(token_id)
        try:
            if t in self.main_ids:
                self.engine.try_accept_new_token(t)
            else:
                self.engine.try_accept_new_bytes(self.token_bytes[t])
        except ValueError:   # rejected, or the grammar had already finished
            return False
        if self.side is not None and t != self.eos_id:
            try:
                self.side.try_accept_new_bytes(self.token_bytes[t])
            except ValueError as err:
                raise EngineError(f"kbnf: the side engine refused {self.token_bytes[t]!r}: {err}") from err
        return True

    def fork(self) -> "KbnfEngine":
        import copy

        other = copy.copy(self)
        other.engine = copy.copy(self.engine)
        other.engine.reset()
        if self.side is not None:
            other.side = copy.copy(self.side)
            other.side.reset()
        other._setup_buffer()
        return other

    def info(self) -> dict:
        return {"grammar_form": "kbnf", "grammar_chars": len(self.source)}

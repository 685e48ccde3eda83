"""llama.cpp's GBNF grammar sampler (PyPI ``llama-cpp-python``, optional extra ``llamacpp``) behind the engine
interface.

llama.cpp needs a model's vocabulary, not its weights: :func:`write_vocab_gguf` writes a vocabulary-only GGUF
(byte-level BPE tokens with their merges, special tokens as control tokens, the EOS id) from the project's
offline :class:`~gcdbench.parsers.tokenizers.Tokenizer`, cached on disk; llama.cpp loads it with
``vocab_only``. The grammar is GBNF from :func:`gcdbench.parsers.convert_dialects.lark_to_gbnf` (scannerless,
ignored text inlined after terminals: the reference's language). A mask is the grammar sampler
(``llama_sampler_init_grammar``) applied to the whole vocabulary as one candidates array: every id that has
bytes, plus EOS (which llama.cpp allows exactly when a grammar stack is empty, i.e. the prefix is a sentence).
Special and padding ids are never candidates, so they are never allowed. A commit first applies the sampler to
that one token (llama.cpp aborts the process when it accepts a token its grammar refuses) and then accepts it.

Known differences from the reference, all in llama.cpp itself (``llama-grammar.cpp``, ``llama-vocab.cpp``):

* a token whose text starts with a NUL byte is always refused (its UTF-8 decoder stops at NUL);
* bytes F5-FF, which never occur in UTF-8, are read as lead bytes of a 4-byte character, so tokens with them are
  allowed wherever any character may follow (inside a string literal);
* llama.cpp marks text tokens that look like end-of-generation markers as EOG by their text (Qwen3's ``</s>``,
  id 128247): such a token is allowed exactly where EOS is, and nowhere else (``info()["eog_text_tokens"]``);
* left-recursive grammars are refused at init (CompileError, llama.cpp's reason); ambiguity multiplies its parse
  stacks (no limit of its own: the runner's time and memory limits apply).
"""
from __future__ import annotations

import ctypes
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gcdbench.parsers.base import CompileError, Engine, EngineError, GrammarSpec, Profile, option

MISSING = ("engine llamacpp needs llama-cpp-python and gguf: pip install -e \".[llamacpp]\" (builds llama.cpp from "
           "source, see README 'Other engines')")


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map (how byte-level BPE vocabularies spell bytes in text)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def _merges(tokenizer) -> list[str]:
    """BPE merges ("left right", byte-level spelling) derived from the token ranks, as Hugging Face writes them."""
    import json

    from gcdbench.parsers.hf_tokenizer import build_fast_tokenizer

    merges = json.loads(build_fast_tokenizer(tokenizer).backend_tokenizer.to_str())["model"]["merges"]
    return [m if isinstance(m, str) else " ".join(m) for m in merges]


_GGUF_FORMAT = "v1"   # bump when write_vocab_gguf changes, so cached files are written again


def gguf_path(tokenizer, cache_dir: str | os.PathLike | None = None) -> Path:
    from gcdbench.parsers.base import cache_root

    cache = Path(cache_dir) if cache_dir else cache_root()
    return cache / "gguf" / f"{tokenizer.name}-{tokenizer.key()}.{_GGUF_FORMAT}.vocab.gguf"


def write_vocab_gguf(tokenizer, path: str | os.PathLike, arch: str = "qwen3") -> Path:
    """A vocabulary-only GGUF for ``tokenizer`` (no tensors): ``tokenizer.ggml.*`` keys only.

    Token text is the byte-level spelling of the token's bytes (type NORMAL), special tokens are CONTROL with
    their names, padding ids UNUSED; merges come from the ranks so llama.cpp can also tokenize with it."""
    import gguf

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    b2u = _bytes_to_unicode()
    names = {i: s for s, i in tokenizer.special_ids.items()}
    tokens, types = [], []
    for i, b in enumerate(tokenizer.token_bytes):
        if i in names:
            tokens.append(names[i])
            types.append(gguf.TokenType.CONTROL)
        elif b:
            tokens.append("".join(b2u[x] for x in b))
            types.append(gguf.TokenType.NORMAL)
        else:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
    merges = _merges(tokenizer)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    w = gguf.GGUFWriter(str(tmp), arch)
    w.add_name(f"gcdbench {tokenizer.name} vocabulary")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2" if tokenizer.name.startswith("qwen") else "default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    # llama.cpp requires the merges key and GGUF stores no empty array: a vocabulary without merges (the
    # byte-level test vocabulary) gets one merge whose result is no token (llama.cpp then keeps the two bytes)
    w.add_token_merges(merges or [f"{b2u[0x20]} {b2u[0x20]}"])
    w.add_eos_token_id(tokenizer.eos_id)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, path)
    return path


class _Llama:
    """The C library, its log routed into a list (llama.cpp logs to stderr by default; engines never print)."""

    def __init__(self):
        import llama_cpp as lc

        self.lc = lc
        self.log: list[str] = []

        @lc.llama_log_callback
        def _log(level, text, user_data):   # keep what llama.cpp says: a refused grammar's reason is only there
            self.log.append(text.decode("utf-8", "replace"))
            del self.log[:-200]

        self._cb = _log
        lc.llama_log_set(self._cb, ctypes.c_void_p(0))
        lc.llama_backend_init()


_LIB: _Llama | None = None


def _lib() -> _Llama:
    global _LIB
    if _LIB is None:
        _LIB = _Llama()
    return _LIB


@dataclass
class LlamaCppOptions:
    cache_dir: str | None = option(None, "where the vocabulary-only GGUF is written once; null: $GCDBENCH_CACHE/gguf")


class LlamaCppEngine(Engine):
    name = "llamacpp"
    plot_style = ("#6b6b6b", "h")   # grey, in every figure
    artifact_keys = {"GGUF MB": ("gguf_mb",), "GBNF chars": ("grammar_chars",)}

    Options = LlamaCppOptions

    @classmethod
    def missing(cls) -> str | None:
        absent = importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("gguf") is None
        return MISSING if absent else None

    def version(self) -> str:
        import importlib.metadata

        return importlib.metadata.version("llama-cpp-python")

    @classmethod
    def complexity(cls, ambiguous: bool = False) -> str:
        # a set of parse stacks advanced per character; ambiguity multiplies the stacks
        return "O(exp n)" if ambiguous else "O(n)"

    def profile(self) -> Profile:
        return Profile()

    def compile(self, grammar: GrammarSpec, tokenizer) -> None:
        from gcdbench.parsers.convert_dialects import lark_to_gbnf

        lib = _lib()
        lc = lib.lc
        path = gguf_path(tokenizer, self.opts["cache_dir"])
        self.gguf_cached = path.exists()
        if not self.gguf_cached:
            write_vocab_gguf(tokenizer, path)
        params = lc.llama_model_default_params()
        params.vocab_only = True
        self.model = lc.llama_model_load_from_file(str(path).encode(), params)
        if not self.model:
            why = [line.strip() for line in lib.log if "error" in line.lower()] or lib.log[-3:]
            raise CompileError(f"llama.cpp could not load the vocabulary {path}: {' '.join(why)}")
        self.vocab = lc.llama_model_get_vocab(self.model)
        self.source = lark_to_gbnf(grammar)
        del lib.log[:]
        self.sampler = lc.llama_sampler_init_grammar(self.vocab, self.source.encode(), b"root")
        if not self.sampler:
            raise CompileError(f"llama.cpp refused the grammar: {' '.join(s.strip() for s in lib.log if s.strip())}")
        special = set(tokenizer.special_ids.values())
        ids = [i for i, b in enumerate(tokenizer.token_bytes) if b and i not in special] + [tokenizer.eos_id]
        self.cand_ids = np.array(sorted(ids), dtype=np.int32)
        self.vocab_size = tokenizer.vocab_size
        self._arrays(len(self.cand_ids))
        self.gguf_mb = round(path.stat().st_size / 2**20, 2)
        self.eog_text = [int(i) for i in self.cand_ids
                         if i != tokenizer.eos_id and lc.llama_vocab_is_eog(self.vocab, int(i))]

    def _arrays(self, n: int):
        lc = self.lc = _lib().lc
        dtype = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])
        assert dtype.itemsize == ctypes.sizeof(lc.llama_token_data)
        self._fresh = np.zeros(n, dtype=dtype)
        self._fresh["id"] = self.cand_ids
        self._data = self._fresh.copy()
        self._arr = lc.llama_token_data_array(
            data=self._data.ctypes.data_as(lc.llama_token_data_p), size=n, selected=-1, sorted=False)
        self._one = np.zeros(1, dtype=dtype)
        self._arr_one = lc.llama_token_data_array(
            data=self._one.ctypes.data_as(lc.llama_token_data_p), size=1, selected=-1, sorted=False)
        self._bits = np.zeros(((self.vocab_size + 31) // 32) * 32, dtype=bool)

    def reset(self) -> None:
        self.lc.llama_sampler_reset(self.sampler)

    def fill_mask(self, out: np.ndarray) -> None:
        np.copyto(self._data, self._fresh)
        self._arr.size = len(self._data)
        self.lc.llama_sampler_apply(self.sampler, ctypes.byref(self._arr))
        self._bits[self.cand_ids] = self._data["logit"] != -np.inf
        out[:] = np.packbits(self._bits, bitorder="little").view(np.int32)[: out.shape[0]]

    def commit(self, token_id: int) -> bool:
        self._one["id"] = int(token_id)
        self._one["logit"] = 0.0
        self._arr_one.size = 1
        self.lc.llama_sampler_apply(self.sampler, ctypes.byref(self._arr_one))
        if self._one["logit"][0] == -np.inf:
            return False
        self.lc.llama_sampler_accept(self.sampler, int(token_id))
        return True

    def fork(self) -> "LlamaCppEngine":
        import copy

        other = copy.copy(self)
        other.sampler = self.lc.llama_sampler_clone(self.sampler)
        if not other.sampler:
            raise EngineError("llama.cpp could not clone the grammar sampler")
        other.lc.llama_sampler_reset(other.sampler)
        other._arrays(len(self.cand_ids))
        return other

    def info(self) -> dict:
        return {"grammar_form": "gbnf", "grammar_chars": len(self.source), "gguf_mb": self.gguf_mb,
                "gguf_cached": self.gguf_cached, "eog_text_tokens": self.eog_text}

    def close(self) -> None:
        if getattr(self, "sampler", None):
            self.lc.llama_sampler_free(self.sampler)
            self.sampler = None

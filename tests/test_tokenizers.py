from __future__ import annotations

import numpy as np


def test_qwen3_vocabulary(qwen3_tokenizer):
    tk = qwen3_tokenizer
    assert tk.vocab_size == 151936
    assert sum(1 for b in tk.token_bytes if b) == 151643
    assert tk.special_ids["<|endoftext|>"] == 151643 and tk.eos_id == tk.special_ids["<|im_end|>"] == 151645
    text = 'SELECT count(*) FROM singer WHERE name = "Joe");'
    ids = tk.encode(text)
    assert tk.decode(ids) == text.encode()
    assert all(tk.token_bytes[i] for i in ids)


def test_engine_views_share_the_vocabulary(qwen3_tokenizer):
    tk = qwen3_tokenizer
    assert tk.xgrammar_info.vocab_size == tk.vocab_size
    ll = tk.llguidance
    assert ll.vocab_size == tk.vocab_size and ll.eos_token == tk.eos_id
    ids = tk.encode("SELECT name FROM t")
    assert ll.decode_bytes(ids) == b"SELECT name FROM t"


def test_byte_level(bytes_tokenizer):
    assert bytes_tokenizer.vocab_size == 257 and bytes_tokenizer.eos_id == 256
    assert bytes_tokenizer.encode("aé") == [97, 0xC3, 0xA9]
    assert bytes_tokenizer.key() != __import__("gcdbench.parsers.tokenizers", fromlist=["qwen3"]).qwen3().key()

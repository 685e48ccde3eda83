from __future__ import annotations

import pytest

from gcdbench.parsers.tokenizers import Tokenizer


def test_qwen3_vocabulary(qwen3_tokenizer):
    tk = qwen3_tokenizer
    assert tk.vocab_size == 151936
    assert sum(1 for b in tk.token_bytes if b) == 151643
    assert tk.special_ids["<|endoftext|>"] == 151643 and tk.eos_id == tk.special_ids["<|im_end|>"] == 151645
    assert tk.token_bytes[0] == b"!" and tk.token_bytes[151642] and not tk.token_bytes[151643]
    text = 'SELECT count(*) FROM singer WHERE name = "Joe");'
    ids = tk.encode(text)
    assert tk.decode(ids) == text.encode()
    assert all(tk.token_bytes[i] for i in ids)
    assert tk.encoding.n_vocab == 151643 + len(tk.special_ids)   # the tiktoken encoding it was loaded with


def test_tiktoken_file_with_missing_ranks_is_refused(tmp_path):
    from gcdbench.parsers.tokenizers import _read_tiktoken_ranks

    path = tmp_path / "short.tiktoken"
    path.write_bytes(b"YQ== 0\nYg== 1\nYw== 3\n")   # a, b, c with rank 2 missing
    with pytest.raises(ValueError, match="expected ranks 0..3"):
        _read_tiktoken_ranks(path, 4)
    path.write_bytes(b"YQ== 0\nYg== 1\nYw== 2\n")   # the same file name, fixed: read again, not from a cache
    assert _read_tiktoken_ranks(path, 3) == {b"a": 0, b"b": 1, b"c": 2}


def test_xgrammar_view_is_the_vocabulary(qwen3_tokenizer):
    from gcdbench.parsers.xgrammar_engine import tokenizer_info

    tk = qwen3_tokenizer
    info = tokenizer_info(tk)
    assert info is tokenizer_info(tk)   # built once per process
    assert info.vocab_size == tk.vocab_size and info.stop_token_ids == [tk.eos_id]
    dec = info.decoded_vocab
    assert all(dec[i] == b for i, b in enumerate(tk.token_bytes) if b)


@pytest.mark.parametrize("name", ["bytes", "qwen3"])
def test_llguidance_view_is_the_vocabulary(name):
    """LLGuidance's tokenizer (``lltokenizer_from_encoding``) has our bytes at every id, every id without bytes
    (specials, padding) as a special token, and our EOS."""
    from gcdbench.parsers.llguidance_engine import ll_tokenizer
    from gcdbench.parsers.tokenizers import load_tokenizer

    tk = load_tokenizer(name)
    ll = ll_tokenizer(tk)
    assert ll is ll_tokenizer(tk)
    assert ll.vocab_size == tk.vocab_size and ll.eos_token == tk.eos_id
    for i, b in enumerate(tk.token_bytes):
        if not b:
            assert ll.is_special_token(i), i
        elif b[0] == 0xFF:   # LLGuidance's marker of a special token; no UTF-8 text has that byte
            assert ll.is_special_token(i) and ll.decode_bytes([i]) == b"", i
        else:
            assert ll.decode_bytes([i]) == b and not ll.is_special_token(i), i
    ids = tk.encode("SELECT name FROM t")
    assert ll.decode_bytes(ids) == b"SELECT name FROM t"


def test_llguidance_view_of_a_vocabulary_built_in_memory():
    from gcdbench.parsers.llguidance_engine import ll_tokenizer

    toks = [bytes([i]) for i in range(256)] + [b"ab", b"select", b""]
    tk = Tokenizer("bytes+2", toks, eos_id=258, special_ids={"<eos>": 258}, _encoder=lambda s: list(s.encode()))
    ll = ll_tokenizer(tk)
    assert ll.vocab_size == 259 and ll.eos_token == 258
    assert ll.decode_bytes([256, 257]) == b"abselect" and ll.is_special_token(258)


def test_duplicate_token_bytes_are_refused():
    tk = Tokenizer("dup", [b"a", b"b", b"a", b""], eos_id=3, special_ids={"<eos>": 3})
    with pytest.raises(ValueError, match="same bytes"):
        tk.encoding


def test_byte_level(bytes_tokenizer):
    assert bytes_tokenizer.vocab_size == 257 and bytes_tokenizer.eos_id == 256
    assert bytes_tokenizer.encode("aé") == [97, 0xC3, 0xA9]
    assert bytes_tokenizer.key() != __import__("gcdbench.parsers.tokenizers", fromlist=["qwen3"]).qwen3().key()

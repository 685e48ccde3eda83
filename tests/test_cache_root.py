"""Every on-disk cache lives under one root, ``$GCDBENCH_CACHE`` (default ``~/.cache/gcdbench``), so a run that
times compiles from nothing (MaskBench's TTFM) points it at a fresh folder; an engine's ``cache_dir`` wins."""
from __future__ import annotations

from gcdbench.parsers.artifacts import artifact_path
from gcdbench.parsers.base import cache_root
from gcdbench.parsers.base import GrammarSpec
from gcdbench.parsers.tokenizers import byte_level

G = GrammarSpec("g", 'start: "a"\n')


def test_every_cache_follows_gcdbench_cache(tmp_path, monkeypatch):
    from gcdbench.parsers.cfgzip_engine import _default_cache_dir
    from gcdbench.parsers.hf_tokenizer import default_hf_cache
    from gcdbench.parsers.valiant.compiled import _cache_path

    monkeypatch.setenv("GCDBENCH_CACHE", str(tmp_path / "c"))
    tok = byte_level()
    assert cache_root() == tmp_path / "c"
    for engine in ("psc", "pre3"):
        assert artifact_path(engine, None, G, tok, fmt=1).parent == tmp_path / "c" / engine
    assert _cache_path(None, G, tok, 0).parent == tmp_path / "c" / "valiant"
    assert _default_cache_dir() == tmp_path / "c" / "cfgzip" and default_hf_cache() == tmp_path / "c" / "hf"
    assert artifact_path("psc", str(tmp_path / "own"), G, tok, fmt=1).parent == tmp_path / "own"
    monkeypatch.delenv("GCDBENCH_CACHE")
    assert str(cache_root()).endswith(".cache/gcdbench")

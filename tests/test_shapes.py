"""The grammar-shape suite (``dataset=shapes``, issue 65): generators, the language-equality proof of every pair
of spellings with the reference checker, acceptance of every sample, and the report's shape section built from a
small end-to-end run."""
from __future__ import annotations

import itertools
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

from gcdbench.datasets.base import DataError
from gcdbench.datasets.fuzz import mutate
from gcdbench.datasets.registry import load_dataset
from gcdbench.datasets.shapes import FAMILIES, keyword_list, shape_grammar, shape_samples
from gcdbench.parsers.base import allocate_mask, mask_to_ids
from gcdbench.parsers.reference import DEAD, ReferenceChecker

REPO = Path(__file__).resolve().parents[1]
#: sizes the equivalence proof runs at: each family's smallest preset size, plus one where the size changes the
#: grammar's structure (ladder levels past C's ten, keywords that are prefixes of others, counted repetitions)
PROOF_SIZES = {name: (f.sizes[0],) for name, f in FAMILIES.items()}
PROOF_SIZES.update(ladder=(5, 12), keywords=(10, 40), counted=(3, 8))
PREFIX_BYTES = 120      # every prefix of the first PREFIX_BYTES bytes of each sample and probe


def _masks(ref: ReferenceChecker, data: bytes) -> list:
    """The mask over the bytes tokenizer after every prefix of ``data`` (the bytes that keep the prefix viable,
    and whether it is a sentence, i.e. EOS), up to the first dead prefix (``None``)."""
    sid, out = ref.initial(), []
    for i in range(len(data) + 1):
        if sid == DEAD:
            out.append(None)
            break
        out.append((frozenset(b for b in range(256) if ref.step(sid, b) != DEAD), ref.accepts(sid)))
        if i < len(data):
            sid = ref.step(sid, data[i])
    return out


def _insert(text: str, rng: random.Random) -> str:
    """``text`` with one character that most shapes forbid somewhere inserted at a random place (a probe that
    usually leaves the language; mutate's edits often keep the permissive ones, such as CSV, inside it)."""
    i = rng.randrange(len(text) + 1)
    return text[:i] + rng.choice('"\x00{};)') + text[i:]


def _load(**opts):
    return load_dataset({"name": "shapes", **opts}, data_root=None)


# ------------------------------------------------------------------------------------------------------------
# generators and options
# ------------------------------------------------------------------------------------------------------------
def test_families_have_five_sizes_and_two_spellings():
    for name, f in FAMILIES.items():
        assert len(f.sizes) == 5 and list(f.sizes) == sorted(set(f.sizes)), name
        assert f.size_range[0] <= f.sizes[0] and f.sizes[-1] <= f.size_range[1], name
        assert len(f.spellings) == 2 and set(f.lalr) <= set(f.spellings), name
    assert FAMILIES["ladder"].sizes == (5, 10, 15, 20, 25)
    assert FAMILIES["keywords"].sizes[0] == 10 and FAMILIES["keywords"].sizes[-1] == 1000
    assert FAMILIES["counted"].sizes[-1] == 256
    kws = keyword_list()
    assert len(kws) == len(set(kws)) == 1000 and all(k.isalpha() and k.islower() for k in kws)
    assert any(a != b and b.startswith(a) for a in kws[:100] for b in kws[:100])   # prefix pairs, as in/int


def test_samples_are_deterministic_and_shared_by_the_spellings():
    for name, f in FAMILIES.items():
        a = _load(family=name, step=1, spelling=0)
        b = _load(family=name, step=1, spelling=1)
        assert [s.text for s in a.samples] == [s.text for s in b.samples], name
        assert [s.id for s in a.samples] == [s.id for s in b.samples], name
        assert a.name == f"shapes_{name}_{f.sizes[1]}_{f.spellings[0]}" and b.name.endswith(f.spellings[1])
        assert a.grammar.lark != b.grammar.lark, name
        assert a.meta["shape"] == {"family": name, "size": f.sizes[1], "spelling": f.spellings[0]}
        assert len(a.samples) == 20 and len({s.text for s in a.samples}) == 20, name
        again = shape_samples(name, f.sizes[1], 20)
        assert [s.text for s in again] == [s.text for s in a.samples]
        assert all(60 <= len(s.text.encode()) <= 20000 for s in a.samples), name
    assert _load(family="ladder", size=7, spelling="flat").meta["ambiguous"]
    assert len(load_dataset({"name": "shapes", "family": "counted"}, None, n=3).samples) == 3


def test_size_changes_the_samples_or_the_grammar():
    json_small, json_big = (shape_samples("one_char_json", s, 5) for s in (256, 4096))
    assert np.mean([len(s.text) for s in json_big]) > 8 * np.mean([len(s.text) for s in json_small])
    depth = [max(_depth(s.text) for s in shape_samples("nested_regular", d, 5)) for d in (2, 16)]
    assert depth == [2, 16]
    assert shape_grammar("ladder", 25, "ladder").lark.count("?l") == 25
    assert '"#o"' in shape_grammar("ladder", 25, "flat").lark and '"#o"' not in shape_grammar("ladder", 24, "flat").lark
    assert "{256}" in shape_grammar("counted", 256, "counted").lark
    assert "{" not in shape_grammar("counted", 256, "expanded").lark.split("UUID:")[1]


def _depth(text: str) -> int:
    d = best = 0
    for ch in text:   # the samples' strings and comments hold no braces
        if ch == "{":
            d += 1
            best = max(best, d)
        elif ch == "}":
            d -= 1
    return best


@pytest.mark.parametrize("opts,words", [
    ({"family": "lader"}, ["unknown family 'lader'", "ladder"]),
    ({"family": "ladder", "size": 26}, ["size 26", "1..25"]),
    ({"family": "ladder", "size": "10"}, ["size '10'", "not an integer"]),
    ({"family": "ladder", "spelling": "regex"}, ["no spelling 'regex'", "ladder, flat"]),
    ({"family": "ladder", "spelling": 2}, ["no spelling 2"]),
    ({"family": "ladder", "step": 5}, ["step 5", "0..4"]),
    ({"family": "ladder", "step": 1, "size": 10}, ["not both"]),
    ({"family": "ladder", "pool": 0}, ["pool 0"]),
    ({"family": "ladder", "sizes": 3}, ["unknown option(s) ['sizes']"]),
])
def test_bad_options_are_one_clear_error(opts, words):
    with pytest.raises(DataError) as err:
        _load(**opts)
    assert all(w in str(err.value) for w in words), str(err.value)
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------------------------------------------------
# the proof of equivalence (reference checker, bytes tokenizer)
# ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("family,size", [
    pytest.param(f, s, marks=[pytest.mark.slow] if i else []) for f in FAMILIES for i, s in enumerate(PROOF_SIZES[f])])
def test_spellings_give_the_same_mask_at_every_prefix(family, size):
    """The audit's language-equality proof: for every pair of spellings, the reference checker (the harness's
    language) allows the same bytes and the same EOS after every prefix of the samples and of mutated probes, up
    to and including the first prefix outside the language."""
    fam = FAMILIES[family]
    refs = {sp: ReferenceChecker(shape_grammar(family, size, sp)) for sp in fam.spellings}
    samples = [s.text for s in shape_samples(family, size, 2)]
    rng = random.Random(f"probe:{family}:{size}")
    probes = [mutate(t[:PREFIX_BYTES], rng) for t in samples for _ in range(2)]
    probes += [_insert(t[:PREFIX_BYTES], rng) for t in samples for _ in range(2)]
    died = 0
    for text in [t[:PREFIX_BYTES] for t in samples] + probes:
        data = text.encode("utf-8")[:PREFIX_BYTES]
        masks = {sp: _masks(r, data) for sp, r in refs.items()}
        for (a, ma), (b, mb) in itertools.combinations(masks.items(), 2):
            diff = next((i for i, (x, y) in enumerate(zip(ma, mb)) if x != y), None)
            assert diff is None and len(ma) == len(mb), (family, size, a, b, data[:diff])
        died += masks[fam.spellings[0]][-1] is None
    assert died, f"{family} {size}: no probe left the language; the probes test invalid prefixes too"


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_sample_is_a_sentence_of_every_spelling(family):
    fam = FAMILIES[family]
    size = fam.sizes[0]
    for sp in fam.spellings:
        ref = ReferenceChecker(shape_grammar(family, size, sp))
        for s in shape_samples(family, size, 4):
            assert ref.is_sentence(s.text.encode("utf-8")), (family, size, sp, s.id)


@pytest.mark.slow
@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_sample_is_a_sentence_at_every_preset_size(family):
    fam = FAMILIES[family]
    for size in fam.sizes:
        for sp in fam.spellings:
            ref = ReferenceChecker(shape_grammar(family, size, sp))
            for s in shape_samples(family, size, 3):
                assert ref.is_sentence(s.text.encode("utf-8")), (family, size, sp, s.id)


def _psc_accepts(eng, tok, text: str) -> bool:
    eng.reset()
    m = allocate_mask(tok.vocab_size)
    for c in text.encode("utf-8"):
        eng.fill_mask(m)
        if c not in set(mask_to_ids(m, tok.vocab_size).tolist()):
            return False
        assert eng.commit(c)
    eng.fill_mask(m)
    return tok.eos_id in set(mask_to_ids(m, tok.vocab_size).tolist())


@pytest.mark.parametrize("family", list(FAMILIES))
def test_psc_accepts_the_samples_of_the_lalr_spellings(family, bytes_tokenizer):
    """psc (LALR(1), standard lexer) allows every byte of every sample of the spellings declared ``lalr``, and
    refuses to compile the flat ladder (ambiguous)."""
    from gcdbench.parsers.base import CompileError
    from gcdbench.parsers.psc.engine import PSCEngine

    fam = FAMILIES[family]
    size = fam.sizes[0]
    for sp in fam.spellings:
        eng = PSCEngine(cache=False)
        if sp not in fam.lalr:
            if family == "ladder":
                with pytest.raises(CompileError, match="not LALR"):
                    eng.compile(shape_grammar(family, size, sp), bytes_tokenizer)
            continue
        eng.compile(shape_grammar(family, size, sp), bytes_tokenizer)
        for s in shape_samples(family, size, 3):
            assert _psc_accepts(eng, bytes_tokenizer, s.text), (family, sp, s.id)


# ------------------------------------------------------------------------------------------------------------
# end to end: the runner, then the report's shape section from the stored cells
# ------------------------------------------------------------------------------------------------------------
def _cfg(tmp_path, *overrides):
    from gcdbench.experiments.config import register

    register()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose(config_name="config", overrides=[
            f"out_dir={tmp_path}", "progress=false", "tokenizer=bytes", "samples=2", "dataset=shapes",
            "dataset.family=counted", "dataset.size=4", "audit.per_sample=1", *overrides])


def test_presets_compose():
    from gcdbench.experiments.config import register

    register()
    for preset in ("shapes", "shapes_small"):
        with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
            cfg = compose(config_name="config", overrides=[f"experiment={preset}", "dataset.family=ladder"],
                          return_hydra_config=True)
        params = cfg.hydra.sweeper.params
        assert set(params["dataset.family"].split(",")) == set(FAMILIES)
        assert params["dataset.spelling"] == "0,1"
        assert cfg.tokenizer.name == "qwen3"


def test_run_two_engines_two_spellings_then_the_shape_section(tmp_path):
    """Valiant and GLRMask on both spellings of the counted family through the runner (tokenizer=bytes), then the
    section from the stored cells: its ratios are those of the stored per-mask times."""
    from gcdbench.experiments.report import stats
    from gcdbench.experiments.report.shapes import shapes_section
    from gcdbench.experiments.runner import run

    results = tmp_path / "runs"
    cells = {}
    for engine in ("valiant", "glrmask"):
        for spelling in ("counted", "expanded"):
            out = run(_cfg(results, f"engine={engine}", f"dataset.spelling={spelling}"))
            cells[engine, spelling] = out
            samples = pd.read_parquet(out / "samples.parquet")
            assert list(samples["outcome"]) == ["ok", "ok"], (engine, spelling)
    text = "\n".join(shapes_section([results], tmp_path / "report"))
    assert "## Grammar shapes" in text and "### counted (bytes)" in text and "valiant / glrmask" in text
    table = pd.read_csv(tmp_path / "report" / "shapes_cells.csv")
    assert len(table) == 4 and set(zip(table["config"], table["spelling"])) == set(cells)
    assert (table["size"] == 4).all() and (table["family"] == "counted").all()
    p50 = {k: pd.read_parquet(v / "steps.parquet")["mask_us"].median() for k, v in cells.items()}
    p99 = {k: np.percentile(pd.read_parquet(v / "steps.parquet")["mask_us"], 99) for k, v in cells.items()}
    rat = pd.read_csv(tmp_path / "report" / "shapes_ratios.csv")
    spell = rat[rat["kind"] == "spelling"]
    assert set(spell["engine"]) == {"valiant", "glrmask"} and set(spell["spelling"]) == {"counted/expanded"}
    for engine in ("valiant", "glrmask"):
        got = spell[spell["engine"] == engine]["p50_ratio"].iloc[0]
        assert got == pytest.approx(p50[engine, "counted"] / p50[engine, "expanded"])
        assert any(ln.startswith(f"| {engine}") for ln in text.splitlines())
    sub = rat[rat["kind"] == "valiant/glrmask"].set_index("spelling")
    assert set(sub.index) == {"counted", "expanded"}
    for sp in ("counted", "expanded"):
        assert sub.loc[sp, "p50_ratio"] == pytest.approx(p50["valiant", sp] / p50["glrmask", sp])
        assert sub.loc[sp, "p99_ratio"] == pytest.approx(p99["valiant", sp] / p99["glrmask", sp])
        # the interval is the paired bootstrap of the two stored cells, and it holds the ratio
        got = {r["statistic"]: r for r in stats.ratios(*(next(iter(stats.read_configs([cells[e, sp]]).values()))
                                                          for e in ("glrmask", "valiant")))}
        for q in ("p50", "p99"):
            lo, hi = sub.loc[sp, f"{q}_lo"], sub.loc[sp, f"{q}_hi"]
            assert (lo, hi) == pytest.approx((got[q]["ratio_lo"], got[q]["ratio_hi"]))
            # (nearest-rank percentiles in the resamples, linear ones in the point: a little slack)
            assert 0.9 * lo <= sub.loc[sp, f"{q}_ratio"] <= 1.1 * hi
        assert f"[{sub.loc[sp, 'p50_lo']:.2f}, {sub.loc[sp, 'p50_hi']:.2f}]" in text
    growth = pd.read_csv(tmp_path / "report" / "shapes_growth.csv")
    assert len(growth) == 4 and growth["p50_slope"].isna().all()   # one size: no slope
    assert (tmp_path / "report" / "figures" / "shapes_cost_bytes.png").stat().st_size > 1000
    assert (tmp_path / "report" / "shapes.md").read_text().startswith("## Grammar shapes")
    from gcdbench.experiments.report.cli import main   # the report's command line adds the section (--shapes)

    main(["--results", str(results), "--out", str(tmp_path / "readme"), "--tokenizer", "bytes",
          "--shapes", str(results)])
    readme = (tmp_path / "readme" / "README.md").read_text()
    assert readme.count("## Grammar shapes") == 1 and f"--shapes {results}" in readme


def test_section_marks_a_refused_cell(tmp_path):
    """psc refuses the ambiguous flat ladder: a compile-error cell, shown as × and left out of the ratios."""
    from gcdbench.experiments.report.shapes import shapes_section
    from gcdbench.experiments.runner import run

    results = tmp_path / "runs"
    out = run(_cfg(results, "engine=psc", "dataset.family=ladder", "dataset.size=5", "dataset.spelling=flat",
                   "samples=1"))
    assert set(pd.read_parquet(out / "samples.parquet")["outcome"]) == {"compile_error"}
    text = "\n".join(shapes_section([results], tmp_path / "report"))
    assert any(ln.startswith("| psc") and "flat" in ln and "×" in ln for ln in text.splitlines()), text
    assert pd.read_csv(tmp_path / "report" / "shapes_ratios.csv").empty
    assert shapes_section([tmp_path / "nothing"], tmp_path / "report2") == []

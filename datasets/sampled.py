"""Sampled decoding: off-gold token sequences drawn from the reference checker's exact masks, stored as datasets.

Gold samples only ever show an engine the prefixes of real outputs. Here a sequence is *generated*: at each step
the next token is drawn (seeded) from the reference's mask over the whole vocabulary, and the sequence is stored
with its token ids, so every engine replays exactly the same tokens through the ordinary runner
(``dataset=<source>_sampled``, or ``dataset=sampled dataset.source=<source>``).

How a sequence is drawn (:func:`sample_sequence`), with ``rng = Random("<seed>:<index>:<attempt>")``:

* a target length ``L`` is the token count of a random gold sample of the source, at most ``max_target``;
* before ``L`` tokens: with probability ``p_stop`` the sequence ends when the prefix is a sentence; otherwise,
  with probability ``p_gold``, the next token is uniform over the allowed tokens that occur in the gold samples'
  tokenizations (keywords, punctuation, names of the data), and else the allowed tokens (EOS excluded) are
  grouped by the checker state they lead to, a group is chosen uniformly and a token uniformly in it. Grouping
  by state makes the draw follow the grammar's structure: the tens of thousands of tokens that merely extend a
  name lead to a handful of states, each keyword or bracket to its own;
* from ``L`` tokens on (the bias toward ending): EOS as soon as it is allowed; otherwise the longest token that
  spells a prefix of a *short completion* of the prefix (:class:`Completer`), so every step shortens the way to
  a sentence and the sequence ends.

Masks come from ``ReferenceChecker(grammar, Profile(lexing=...))``. The default, ``longest_match``, is the reference run as a
longest-match lexer reads the text: its sentences are sentences of the harness's (scannerless) language too, and
they avoid texts that only the scannerless reading accepts (``SELECT count`` + ``FROM`` written ``countFROM``),
which lexer-based engines refuse by design (a documented difference); ``scannerless`` samples those too, and
``standard`` only texts that Lark's standard lexer (PSC's: all terminals compete, keywords reserved) reads the
same way. Every stored sequence is checked: each prefix is viable, and the whole text is a sentence, under the
scannerless reading and the one it was drawn with.

Command line (writes ``datasets/sampled/<source>.<tokenizer>.json``; each step walks the whole vocabulary)::

    python -m gcdbench.datasets.sampled --source spider --tokenizer qwen3 --n 30 --seed 0
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

from gcdbench.datasets.base import Dataset, Sample, pick
from gcdbench.datasets.sampling import (  # noqa: F401 - the generator's names, re-exported
    COMPLETION_ALPHABET, Completer, SamplerParams, SamplingError, check_sequence, generate, sample_sequence,
    shortest_completion)

SAMPLED_DIR = Path(__file__).parent / "sampled"
FORMAT = "gcdbench-sampled-1"


# --------------------------------------------------------------------------------------------------
# the dataset file and the loader
# --------------------------------------------------------------------------------------------------
def default_path(source: str, tokenizer: str) -> Path:
    return SAMPLED_DIR / f"{source}.{tokenizer}.json"


def source_config(source: str) -> dict:
    """The config node of a source dataset (its declared defaults are filled in by the registry)."""
    from gcdbench.datasets.registry import datasets

    if source == "sampled":
        raise ValueError(f"source dataset {source!r} is itself a sampled dataset; name the dataset it samples")
    if source not in datasets():
        raise ValueError(f"unknown source dataset {source!r}; valid: {sorted(set(datasets()) - {'sampled'})}")
    return {"name": source}


def load_source(source: str, data_root) -> Dataset:
    from gcdbench.datasets.registry import load_dataset

    return load_dataset(source_config(source), data_root=data_root, n=None, seed=0)


def write_sampled(path: Path, source_name: str, source: Dataset, tokenizer, seqs: list[dict], seed: int,
                  params: SamplerParams, seconds: float) -> Path:
    from gcdbench.parsers.common.gitstate import git_commit, repo_folders

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "format": FORMAT, "source": source_name, "dataset": source.name, "grammar": source.grammar.name,
        "grammar_key": source.grammar.key(), "tokenizer": tokenizer.name, "tokenizer_key": tokenizer.key(),
        "seed": seed, "n": len(seqs), "params": asdict(params), "generation_s": round(seconds, 1),
        # the stored sequences themselves do not make the generator's tree dirty (regenerating all ten writes
        # them one after another into this tracked folder)
        "git_commit": git_commit(ignore=repo_folders(SAMPLED_DIR)),
        "command": f"python -m gcdbench.datasets.sampled --source {source_name} --tokenizer {tokenizer.name} "
                   f"--n {len(seqs)} --seed {seed}",
        "sequences": seqs,
    }
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def read_sampled(path: Path) -> dict:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no sampled-sequence file {path}; generate it with python -m "
                                f"gcdbench.datasets.sampled --source <dataset> --tokenizer <tokenizer> (see README)")
    doc = json.loads(path.read_text(encoding="utf-8"))
    if doc.get("format") != FORMAT:
        raise ValueError(f"{path} is not a sampled-sequence file (format {doc.get('format')!r}, want {FORMAT!r})")
    return doc


def load_sampled(dcfg, data_root, n=None, seed=0) -> Dataset:
    """``dataset=sampled`` (``source``, ``tokenizer``, optional ``file``): the stored sequences of a source
    dataset, each a :class:`Sample` with its token ids. The source is loaded for its grammar, which must be the
    one the sequences were drawn from (same content hash)."""
    get = dcfg.get
    source_name = get("source")
    if not source_name:
        raise ValueError("dataset=sampled needs dataset.source=<dataset it samples>, e.g. spider")
    tok_name = get("tokenizer") or "qwen3"
    path = Path(get("file") or default_path(source_name, tok_name))
    doc = read_sampled(path)
    if doc["tokenizer"] != tok_name:
        raise ValueError(f"{path} holds {doc['tokenizer']} token ids, but this run uses tokenizer={tok_name}; "
                         f"generate sequences for it with python -m gcdbench.datasets.sampled --source "
                         f"{source_name} --tokenizer {tok_name}")
    source = load_source(source_name, data_root)
    if doc["grammar_key"] != source.grammar.key():
        raise ValueError(f"{path} was drawn from another version of grammar {doc['grammar']!r} (key "
                         f"{doc['grammar_key']}, now {source.grammar.key()}); regenerate it: {doc['command']}")
    samples = [Sample(s["id"], s["text"], tuple(s["ids"]), doc["tokenizer"]) for s in doc["sequences"]]
    from gcdbench.parsers.tokenizers import load_tokenizer

    tok = load_tokenizer(tok_name)
    pieces = {s["id"]: [tok.token_bytes[t].decode("utf-8", "backslashreplace") for t in s["ids"]]
              for s in doc["sequences"]}
    from gcdbench.datasets.registry import dataset_loader

    meta = {"source": source_name, "ambiguous": dataset_loader(source_name).ambiguous,   # as its source
            "file": str(path), "seed": doc["seed"], "params": doc["params"],
            "generated_by": doc["command"], "git_commit": doc.get("git_commit"),
            "lengths": [len(s["ids"]) for s in doc["sequences"]], "pieces": pieces}
    return Dataset(name=f"{source.name}_sampled", grammar=source.grammar, samples=pick(samples, n, seed), meta=meta)


# --------------------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------------------
def main(argv=None) -> Path:
    ap = argparse.ArgumentParser(description="Draw off-gold token sequences from the reference checker's masks "
                                             "and store them as a dataset (dataset=<source>_sampled).")
    ap.add_argument("--source", required=True, help="dataset config name under conf/dataset (spider, json, ...)")
    ap.add_argument("--tokenizer", default="qwen3")
    ap.add_argument("--n", type=int, default=30, help="number of sequences")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-root", default="../shared/data")
    ap.add_argument("--out", default=None, help="file to write (default datasets/sampled/<source>.<tokenizer>.json)")
    for f, v in asdict(SamplerParams()).items():
        ap.add_argument(f"--{f.replace('_', '-')}", type=type(v), default=v)
    args = ap.parse_args(argv)
    from gcdbench.parsers.tokenizers import load_tokenizer

    params = SamplerParams(**{f: getattr(args, f) for f in asdict(SamplerParams())})
    tok = load_tokenizer(args.tokenizer)
    source = load_source(args.source, args.data_root)
    t0 = time.perf_counter()

    def progress(i, n, seq):
        print(f"[{i}/{n}] {seq['id']}: {len(seq['ids'])} tokens ({seq['closing_steps']} closing) in "
              f"{seq['seconds']:.1f}s: {seq['text'][:100]!r}", file=sys.stderr, flush=True)

    seqs = generate(source, tok, args.n, args.seed, params, progress)
    out = write_sampled(Path(args.out) if args.out else default_path(args.source, tok.name), args.source, source,
                        tok, seqs, args.seed, params, time.perf_counter() - t0)
    print(out)
    return out


if __name__ == "__main__":
    main()


# -- registration (pyproject.toml, entry-point group gcdbench.datasets) --------------------------------------
from gcdbench.datasets.registry import loader  # noqa: E402 - the registry imports this module lazily, by name


@loader(source=(None, "the dataset whose grammar the sequences were drawn from (conf/dataset/sampled.yaml: spider)"),
        tokenizer=(None, "whose token ids they are (conf/dataset/sampled.yaml: the run's tokenizer); null: qwen3"),
        file=(None, "null: datasets/sampled/<source>.<tokenizer>.json"))
def sampled(name, dcfg, data_root, n, seed) -> Dataset:
    return load_sampled(dcfg, data_root, n=n, seed=seed)

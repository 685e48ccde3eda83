"""Audit: compare an engine's mask with the reference checker's, exactly, on sampled steps.

Each audited mask is compared over the whole vocabulary (the reference walks it as a lazily built DFA: the
oracle token, every token the engine allows, and all the rest) with two references:

(a) the harness's language, ``ReferenceChecker(grammar, Profile())`` (columns ``agree_language``, and ``agree``
    for continuity, ``n_false_allow`` / ``n_false_block``);
(b) the language the engine declares, ``ReferenceChecker(grammar, engine.profile())`` (columns
    ``agree_profile``, ``n_false_allow_profile`` / ``n_false_block_profile``).

A difference from (a) that (b) shares is the declared profile at work; a difference from (b) is a
disagreement, listed with examples of every kind (false allows and false blocks, a few each). Nothing is
explained away by a rule of thumb: the profile is executed exactly by the reference.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
from pathlib import Path

import numpy as np

from gcdbench.experiments import schema
from gcdbench.parsers.base import Profile, mask_to_ids
from gcdbench.parsers.reference import DEAD, ReferenceChecker

MAX_EXAMPLES = 5


@functools.lru_cache(maxsize=16)
def reference(grammar, profile: Profile = Profile()) -> ReferenceChecker:
    """One checker per (grammar, profile), shared by every auditor of the process (its memo tables grow)."""
    return ReferenceChecker(grammar, profile)


@functools.lru_cache(maxsize=1)
def reference_source_digest() -> str:
    """A digest of the reference's code (checker, regex DFAs, grammar loading): part of every cached mask's key,
    so a change to the reference never serves a mask it computed before."""
    from gcdbench.parsers import grammar, reference as ref_module, regex_fsm

    h = hashlib.sha256()
    for m in (ref_module, regex_fsm, grammar):
        h.update(Path(m.__file__).read_bytes())
    return h.hexdigest()[:16]


class MaskCache:
    """Reference masks on disk, one packed bitmask file per (reference code, grammar, tokenizer, profile, prefix):
    every engine of a sweep audits the same steps of the same samples (the steps are chosen from the sample and
    the seed), so the reference computes each mask once for all of them (issue 27)."""

    def __init__(self, folder, grammar, tokenizer):
        self.folder = Path(folder)
        self.vocab = tokenizer.vocab_size
        h = hashlib.sha256(f"{reference_source_digest()}|{tokenizer.key()}|{grammar.start}|".encode())
        h.update(grammar.lark.encode())
        self.base = h.digest()

    def _path(self, profile: Profile, prefix: bytes) -> Path:
        h = hashlib.sha256(self.base)
        h.update(repr(profile).encode() + b"\0" + prefix)
        key = h.hexdigest()
        return self.folder / key[:2] / f"{key[2:]}.npy"

    def get(self, profile: Profile, prefix: bytes, compute) -> np.ndarray:
        path = self._path(profile, prefix)
        try:
            bits = np.load(path)
            return np.flatnonzero(np.unpackbits(bits, count=self.vocab)).astype(np.int64)
        except (OSError, ValueError):   # absent, or damaged: computed again and rewritten
            pass
        ids = compute()
        bits = np.zeros(self.vocab, dtype=bool)
        bits[ids] = True
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        with open(tmp, "wb") as fh:
            np.save(fh, np.packbits(bits))
        os.replace(tmp, path)
        return ids


def profile_str(profile: Profile) -> str:
    """The fields that differ from the harness's language, e.g. ``lexing=longest_match, trailing_ignore=False``
    (``language`` for ``Profile()``)."""
    base = Profile()
    diff = [f"{f.name}={getattr(profile, f.name)}" for f in dataclasses.fields(Profile)
            if getattr(profile, f.name) != getattr(base, f.name)]
    return ", ".join(diff) or "language"


class Auditor:
    """Audits masks of one engine on one grammar and tokenizer.

    ``profile`` is the language the engine declares (``engine_class(name)(**options).profile()``); the default,
    ``Profile()``, is the harness's language, and then (a) and (b) are one comparison. (The older call form
    ``Auditor(grammar, tokenizer, engine_name, options)`` is still accepted: it builds that profile itself.)
    """

    def __init__(self, grammar, tokenizer, profile: Profile | str = Profile(), options: dict | None = None,
                 cache_dir=None):
        if isinstance(profile, str):   # legacy form: an engine name and its options
            from gcdbench.parsers.registry import engine_class

            profile = engine_class(profile)(**(options or {})).profile() if profile else Profile()
        if not isinstance(profile, Profile):
            raise TypeError(f"profile must be a gcdbench.parsers.base.Profile, not {type(profile).__name__}")
        self.grammar = grammar
        self.tok = tokenizer
        self.profile = profile
        self.ref = reference(grammar)
        self.ref_profile = self.ref if profile == Profile() else reference(grammar, profile)
        self.cache = MaskCache(cache_dir, grammar, tokenizer) if cache_dir is not None else None

    @staticmethod
    def _ids(checker: ReferenceChecker, prefix: bytes, tok) -> np.ndarray:
        sid = checker.advance(checker.initial(), prefix)
        return np.array([], dtype=np.int64) if sid == DEAD else checker.full_mask_ids(sid, tok)

    def reference_ids(self, prefix: bytes, profile: bool = False) -> np.ndarray:
        """Token ids allowed after ``prefix`` in the harness's language (``profile=True``: in the declared one)."""
        checker = self.ref_profile if profile else self.ref
        if self.cache is None:
            return self._ids(checker, prefix, self.tok)
        return self.cache.get(checker.profile, prefix, lambda: self._ids(checker, prefix, self.tok))

    def compare(self, prefix: bytes, got: np.ndarray) -> dict:
        """One step's comparison of the engine's allowed ids ``got`` (ascending) with both references."""
        lang = self.reference_ids(prefix)
        prof = lang if self.ref_profile is self.ref else self.reference_ids(prefix, profile=True)
        extra, missing = np.setdiff1d(got, lang, assume_unique=True), np.setdiff1d(lang, got, assume_unique=True)
        extra_p, missing_p = np.setdiff1d(got, prof, assume_unique=True), np.setdiff1d(prof, got, assume_unique=True)
        return {
            "profile": profile_str(self.profile),
            "n_engine": int(got.size), "n_reference": int(lang.size), "n_profile": int(prof.size),
            "agree": bool(extra.size == 0 and missing.size == 0),
            "agree_language": bool(extra.size == 0 and missing.size == 0),
            "agree_profile": bool(extra_p.size == 0 and missing_p.size == 0),
            "n_false_allow": int(extra.size), "n_false_block": int(missing.size),
            "n_false_allow_profile": int(extra_p.size), "n_false_block_profile": int(missing_p.size),
            "false_allow_examples": [self._show(t) for t in extra[:MAX_EXAMPLES]],
            "false_block_examples": [self._show(t) for t in missing[:MAX_EXAMPLES]],
            "false_allow_examples_profile": [self._show(t) for t in extra_p[:MAX_EXAMPLES]],
            "false_block_examples_profile": [self._show(t) for t in missing_p[:MAX_EXAMPLES]],
        }

    def check(self, text: str, ids: list[int], audited: dict) -> list[dict]:
        """Rows for the audited steps of one sample (``audit.parquet``'s declared columns less the cell key):
        ``audited`` maps step -> the engine's packed mask there."""
        rows = []
        for step in sorted(audited):
            prefix = self.tok.decode(ids[:step])
            got = mask_to_ids(np.asarray(audited[step], dtype=np.int32), self.tok.vocab_size)
            rows.append(schema.row("audit", step=int(step), prefix=prefix.decode("utf-8", "replace")[-200:],
                                   **self.compare(prefix, got)))
        return rows

    def _show(self, t) -> str:
        t = int(t)
        if t == self.tok.eos_id:
            return "<EOS>"
        return repr(self.tok.token_bytes[t])[2:-1] or f"<special {t}>"


# --------------------------------------------------------------------------------------------------
# Which profile does an engine implement? (exact: each candidate is executed by the reference)
# --------------------------------------------------------------------------------------------------
VARIANTS = {"lexing": ("longest_match", "standard", "dynamic"), "trailing_ignore": (False,), "leading_ignore": (True,),
            "case_fold": ("unicode_simple", "ascii"), "regex_classes": ("ascii", "uts18"), "token_bytes": ("latin1",)}


def observe(engine, tokenizer, text: str, steps=None) -> list[tuple[bytes, np.ndarray]]:
    """Teacher-force ``engine`` (compiled) through ``text``: (prefix, allowed ids) at each step in ``steps``
    (all steps, EOS step included, when None). Stops early when the engine refuses the oracle token."""
    from gcdbench.experiments.steplog import step_along
    from gcdbench.parsers.base import allocate_mask

    out, prefix = [], [b""]

    def on_mask(k, mask, allowed, mask_ns, jit):
        if steps is None or k in steps:
            out.append((prefix[0], mask_to_ids(mask, tokenizer.vocab_size)))

    def on_commit(k, t, commit_ns):
        prefix[0] += tokenizer.token_bytes[t]

    step_along(engine, tokenizer.encode(text) + [tokenizer.eos_id], allocate_mask(tokenizer.vocab_size), on_mask,
               on_commit, raise_errors=True)
    return out


def fit_profile(grammar, tokenizer, observations) -> dict:
    """Search the profile that makes the most observed steps agree exactly (ties: fewest differing tokens):
    coordinate descent from the language over the fields of ``VARIANTS`` (each field tried at every value
    with the others at the current best, until nothing improves), then every field that scores as well at
    its default is dropped (the simplest explanation). Every candidate is executed by the reference, so the
    scores are exact.
    Returns ``{"best": profile_str, "best_agree", "steps", "scores": [{profile, agree, steps, examples}]}``
    with the first residual differences (prefix, false allows, false blocks) of each candidate tried."""
    cache: dict = {}

    def score(profile):
        if profile not in cache:
            aud = Auditor(grammar, tokenizer, profile)
            agree, n_diff, examples = 0, 0, []
            for prefix, got in observations:
                row = aud.compare(prefix, got)
                n_diff += row["n_false_allow_profile"] + row["n_false_block_profile"]
                if row["agree_profile"]:
                    agree += 1
                elif len(examples) < 3:
                    examples.append({"prefix": prefix.decode("utf-8", "replace")[-80:],
                                     "false_allow": row["false_allow_examples_profile"],
                                     "false_block": row["false_block_examples_profile"]})
            cache[profile] = {"profile": profile_str(profile), "agree": agree, "steps": len(observations),
                              "differing_tokens": n_diff, "examples": examples}
        return cache[profile]["agree"], -cache[profile]["differing_tokens"]

    best = Profile()
    improved = True
    while improved and score(best)[0] < len(observations):
        improved = False
        for field, values in VARIANTS.items():
            for v in (getattr(Profile(), field),) + values:
                cand = dataclasses.replace(best, **{field: v})
                if score(cand) > score(best):
                    best, improved = cand, True
    # then the simplest profile that scores as well: drop every field whose default does no worse
    for field in VARIANTS:
        simpler = dataclasses.replace(best, **{field: getattr(Profile(), field)})
        if simpler != best and score(simpler) >= score(best):
            best = simpler
    return {"best": profile_str(best), "best_agree": score(best)[0], "steps": len(observations),
            "scores": list(cache.values())}


def main(argv=None) -> None:
    """``python -m gcdbench.experiments.audit --engine NAME [--opt k=v ...] --dataset spider --samples 3``:
    teacher-force the engine through a few samples, audit every step, and print (and store) which profile
    makes every step agree, with the residual differences of each candidate."""
    import argparse
    import json
    from pathlib import Path

    from gcdbench.datasets.registry import load_dataset
    from gcdbench.parsers.registry import create_engine
    from gcdbench.parsers.tokenizers import load_tokenizer

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--engine", required=True)
    ap.add_argument("--opt", action="append", default=[], help="engine option k=v (JSON values), repeatable")
    ap.add_argument("--dataset", default="sample")
    ap.add_argument("--data-root", default="../shared/data")
    ap.add_argument("--grammar", default=None, help="with --dataset custom: the .lark file")
    ap.add_argument("--samples-file", default=None, help="with --dataset custom: one sample per line")
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--max-steps", type=int, default=40, help="audited steps per sample (evenly spaced)")
    ap.add_argument("--tokenizer", default="qwen3")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="JSON file for the result")
    args = ap.parse_args(argv)
    opts = {}
    for kv in args.opt:
        k, v = kv.split("=", 1)
        try:
            opts[k] = json.loads(v)
        except json.JSONDecodeError:
            opts[k] = v
    tok = load_tokenizer(args.tokenizer)
    dcfg = {"name": args.dataset, "grammar": args.grammar, "samples": args.samples_file}
    ds = load_dataset(dcfg, args.data_root, n=args.samples, seed=args.seed)
    engine = create_engine(args.engine, **opts)
    engine.compile(ds.grammar, tok)
    obs = []
    for s in ds.samples:
        n = len(tok.encode(s.text)) + 1
        stride = max(1, n // args.max_steps)
        obs += observe(engine, tok, s.text, set(range(0, n, stride)) | {n - 1})
    result = {"engine": args.engine, "options": opts, "dataset": args.dataset, "tokenizer": args.tokenizer,
              "samples": [s.id for s in ds.samples], "declared": profile_str(engine.profile()),
              **fit_profile(ds.grammar, tok, obs)}
    text = json.dumps(result, indent=1, ensure_ascii=False)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()

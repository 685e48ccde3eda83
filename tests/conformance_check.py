"""The conformance check shared by the engine tests: an engine's whole mask at every step of some samples,
against the reference checker under the engine's declared profile (byte-level vocabulary)."""
from __future__ import annotations

from gcdbench.experiments.audit import Auditor
from gcdbench.parsers.base import allocate_mask, mask_get, mask_to_ids
from gcdbench.parsers.reference import ReferenceChecker

# Engines whose masks differ from every profile, each with the exact set of differences they may show on this
# byte vocabulary (a property of the engine, found by the audit and reported to its authors' trackers, not
# excused in any result: the audit lists these as disagreements). The test fails on any other difference and
# when a listed one stops occurring.
KNOWN_DEFECTS = {
    # llama.cpp's grammar sampler refuses NUL everywhere and reads bytes F5-FF as 4-byte UTF-8 lead bytes
    "llamacpp": {"false_allow": set(range(0xF5, 0x100)), "false_block": {0x00}},
}
# Engines that over-approximate by design: only the oracle path is checked (every oracle token and the final
# EOS allowed), and that they do differ (so the entry cannot go stale).
APPROXIMATE = {"syncode": "its mask store accepts what Lark's lexer may read after the next terminal"}


def check_masks(engine, name: str, case: str, grammar, tok, samples) -> bool:
    """Teacher-force ``samples`` (texts) through the compiled ``engine`` and compare every mask exactly with the
    reference under ``engine.profile()`` (an engine in ``KNOWN_DEFECTS`` may show exactly those differences;
    one in ``APPROXIMATE`` is checked on the oracle path only). Returns whether any mask differed from the
    harness's language (or, for the two tables' engines, from the profile)."""
    auditor = Auditor(grammar, tok, engine.profile())   # after compile: a profile may depend on it
    mask = allocate_mask(tok.vocab_size)
    differs = False
    defects = KNOWN_DEFECTS.get(name)
    for sample in samples:
        engine.reset()
        prefix = b""
        for t in tok.encode(sample) + [tok.eos_id]:
            engine.fill_mask(mask)
            got = mask_to_ids(mask, tok.vocab_size)
            row = auditor.compare(prefix, got)
            differs |= not row["agree_profile"] if (defects or name in APPROXIMATE) else not row["agree_language"]
            if defects is not None:
                want = auditor.reference_ids(prefix, profile=True)
                extra, missing = set(got.tolist()) - set(want.tolist()), set(want.tolist()) - set(got.tolist())
                assert extra <= defects["false_allow"] and missing <= defects["false_block"], (
                    f"{name} on {case}: after {prefix!r} differences beyond its known defects: allowed by the "
                    f"engine only {sorted(extra - defects['false_allow'])}, by the reference only "
                    f"{sorted(missing - defects['false_block'])}")
            elif name not in APPROXIMATE:
                assert row["agree_profile"], (
                    f"{name} on {case} ({row['profile']}): after {prefix!r} allowed by the engine only "
                    f"{row['false_allow_examples_profile']}, by the reference only {row['false_block_examples_profile']}")
            assert mask_get(mask, t), f"{name} on {case}: the oracle token {t} is not allowed after {prefix!r}"
            if t == tok.eos_id:
                break
            assert engine.commit(t), f"{name} on {case}: commit of the oracle token {t} after {prefix!r} refused"
            prefix += tok.token_bytes[t]
    return differs


def allowed(engine, tok) -> set[int]:
    """The engine's mask as a set of ids; the buffer starts all ones, so a word the engine leaves alone shows."""
    mask = allocate_mask(tok.vocab_size)
    mask[:] = -1
    engine.fill_mask(mask)
    return set(mask_to_ids(mask, tok.vocab_size).tolist())


def disagreements(engine, grammar, tok, samples, brute_force: bool = False) -> list[tuple]:
    """Teacher-force ``samples`` through the compiled ``engine``; every oracle token and the final EOS must be
    allowed. Returns ``(prefix, token bytes, side)`` for every token where the engine and the reference (the
    harness's language; ``brute_force``: each token checked on its own instead of the full-mask walk) disagree."""
    ref = ReferenceChecker(grammar)
    out = []
    for sample in samples:
        engine.reset()
        prefix = b""
        for t in tok.encode(sample) + [tok.eos_id]:
            got = allowed(engine, tok)
            if brute_force:
                want = ref.allowed_tokens(prefix, range(tok.vocab_size), tok)
            else:
                want = set(ref.full_mask_ids(ref.advance(ref.initial(), prefix), tok).tolist())
            out += [(prefix, b"<eos>" if i == tok.eos_id else tok.token_bytes[i],
                     "engine only" if i in got else "reference only") for i in sorted(got ^ want)]
            assert t in got, f"oracle token {tok.token_bytes[t]!r} masked after {prefix!r}"
            if t == tok.eos_id:
                break
            assert engine.commit(t)
            prefix += tok.token_bytes[t]
    return out

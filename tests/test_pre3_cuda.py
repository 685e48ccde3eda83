"""Engine ``pre3``, CUDA backend: the kernels run in numba's CUDA simulator (a subprocess, because
``NUMBA_ENABLE_CUDASIM`` must be set before numba.cuda starts) and must give the CPU backend's masks bit for
bit, one sequence at a time and as a batch (one launch for all sequences). Vocabularies are tiny (the
simulator runs every GPU thread as a Python thread). Tests marked ``gpu`` run on a real device."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cuda_check import cuda_env, require_gpu

HERE = Path(__file__).resolve().parent

SCRIPT = textwrap.dedent(r'''
    import sys
    sys.path.insert(0, sys.argv[1])
    import numpy as np
    from gcdbench.parsers.base import GrammarSpec, allocate_mask
    from gcdbench.parsers.pre3.engine import Pre3Engine
    from test_pre3 import CASES
    from test_valiant import multi_tokenizer

    (name, front_end), threads, block = (sys.argv[2].split("/") + ["auto"])[:2], int(sys.argv[3]), int(sys.argv[4])
    text, samples = CASES[name]
    samples = [s for s in samples if s][:2]
    tok = multi_tokenizer(samples, extra=[b"(((", b", ", b"[1, ", b"\" ", b"--"])
    spec = GrammarSpec(name, text)
    # dense_min=8 and chunk=64: some jobs have mask rows, some token lists, over several chunks
    cpu = Pre3Engine(cache=False, dense_min=8, chunk=64, front_end=front_end)
    cpu.compile(spec, tok)
    assert cpu.info()["dense_jobs"] > 0 and cpu.info()["listed_tokens"] > 0
    gpu = Pre3Engine(cache=False, backend="cuda", cuda_threads=threads, cuda_block=block, dense_min=8, chunk=64,
                     front_end=front_end)
    gpu.compile(spec, tok)
    W = (tok.vocab_size + 31) // 32
    steps = 0
    for s in samples:
        cpu.reset(); gpu.reset()
        for t in tok.encode(s) + [tok.eos_id]:
            a, b = allocate_mask(tok.vocab_size), allocate_mask(tok.vocab_size)
            cpu.fill_mask(a); gpu.fill_mask(b)
            assert np.array_equal(a, b), (s, steps)
            assert (a != 0).any()
            steps += 1
            assert cpu.commit(t) and gpu.commit(t)
    print("sequential ok", steps)
    # a batch: forks at different positions, one of them finished
    cs = [cpu] + [cpu.fork() for _ in range(3)]
    gs = [gpu] + [gpu.fork() for _ in range(3)]
    ids = tok.encode(samples[0])
    for i, (c, g) in enumerate(zip(cs, gs)):
        c.reset(); g.reset()
        stream = ids[: 2 * i + 1] if i < 3 else ids + [tok.eos_id]
        for t in stream:
            assert c.commit(t) and g.commit(t)
    oc = np.full((4, W), -1, np.int32); og = np.full((4, W), -1, np.int32)
    cpu.fill_masks(cs, oc); gpu.fill_masks(gs, og)
    assert np.array_equal(oc, og)
    assert not oc[3].any()
    for i, c in enumerate(cs):
        m = allocate_mask(tok.vocab_size); c.fill_mask(m)
        assert np.array_equal(m, oc[i]), i
    print("batch ok")
''')


def _run(name, threads, block, tmp_path, simulator: bool):
    script = tmp_path / "sim.py"
    script.write_text(SCRIPT)
    r = subprocess.run([sys.executable, str(script), str(HERE), name, str(threads), str(block)],
                       env=cuda_env(simulator), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "sequential ok" in r.stdout and "batch ok" in r.stdout


# tiny_sql, calc and json (its exact lexer): lexer front end; json/chars: the character level. Few threads: each
# one walks many jobs
CASES = [("tiny_sql", 64, 32), ("calc", 32, 16), ("json", 64, 32), ("json/chars", 64, 32)]


@pytest.mark.parametrize("name,threads,block", CASES)
def test_cuda_simulator_equals_cpu(name, threads, block, tmp_path):
    _run(name, threads, block, tmp_path, simulator=True)


@pytest.mark.gpu
@pytest.mark.parametrize("name,threads,block", CASES + [("calc", 16384, 128)])
def test_cuda_device_equals_cpu(name, threads, block, tmp_path):
    require_gpu()
    _run(name, threads, block, tmp_path, simulator=False)


@pytest.mark.gpu
@pytest.mark.parametrize("gname", ["spider", "spider_spop"])
def test_cuda_device_qwen3_batch_equals_cpu(gname, tmp_path):
    """Real grammar, Qwen3 vocabulary, a batch of 8 on a real GPU: every mask equals the CPU backend's."""
    require_gpu()
    script = tmp_path / "dev.py"
    script.write_text(textwrap.dedent('''
        import sys
        import numpy as np
        from gcdbench.datasets.base import load_grammar
        from gcdbench.datasets.spider import to_spop
        from gcdbench.parsers.pre3.engine import Pre3Engine
        from gcdbench.parsers.tokenizers import load_tokenizer
        g, tok = load_grammar(sys.argv[1]), load_tokenizer("qwen3")
        cpu, gpu = Pre3Engine(cache=False), Pre3Engine(cache=False, backend="cuda")
        cpu.compile(g, tok); gpu.compile(g, tok)
        qs = ["SELECT count(*) FROM singer WHERE age > 20 AND name != 'Joe'",
              "SELECT T1.name, avg(T2.age) FROM a AS T1 JOIN b AS T2 ON T1.id = T2.id GROUP BY T1.name"] * 4
        if sys.argv[1] == "spider_spop":
            qs = [to_spop(q) for q in qs]
        streams = [tok.encode(q) + [tok.eos_id] for q in qs]
        cs = [cpu] + [cpu.fork() for _ in qs[1:]]
        gs = [gpu] + [gpu.fork() for _ in qs[1:]]
        W = (tok.vocab_size + 31) // 32
        for step in range(max(map(len, streams))):
            a, b = np.zeros((len(qs), W), np.int32), np.zeros((len(qs), W), np.int32)
            cpu.fill_masks(cs, a); gpu.fill_masks(gs, b)
            assert np.array_equal(a, b), step
            for i in range(len(qs)):
                if step < len(streams[i]):
                    assert cs[i].commit(streams[i][step]) and gs[i].commit(streams[i][step])
        print("device ok")
    '''))
    r = subprocess.run([sys.executable, str(script), gname], env=cuda_env(False), capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "device ok" in r.stdout

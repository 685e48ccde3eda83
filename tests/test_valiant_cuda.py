"""Engine ``valiant``, CUDA backend: the kernels run in numba's CUDA simulator and must agree bit for bit with
the CPU backend: the chart step (tier, ANC, EXPECT words), the viable nodes of the tree search, the masks.

Each check is a case of ``tests/valiant_cuda_cases.py`` run in a child process (``NUMBA_ENABLE_CUDASIM`` must be
set before numba.cuda starts). Small grammars run on the stock simulator (one Python thread per CUDA thread);
Qwen3-size inputs run with ``--fast`` (tests/cudasim_fast.py: the same simulator with a barrier in place of its
polling loop, 10-50x faster). Tests marked ``gpu`` run the same cases on a real device (``pytest -m gpu``);
without one they skip, saying so."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cuda_check import cuda_env, require_gpu

HERE = Path(__file__).resolve().parent
CASES = HERE / "valiant_cuda_cases.py"


def _case(*args, simulator: bool = True, timeout: int = 600) -> str:
    """Run one case; returns what it printed after '<case> ok'."""
    r = subprocess.run([sys.executable, str(CASES), *map(str, args)], env=cuda_env(simulator), capture_output=True,
                       text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    line = [ln for ln in r.stdout.splitlines() if ln.startswith(f"{args[0]} ok")]
    assert line, r.stdout[-3000:]
    return line[-1].split(" ok ", 1)[1]


# -- small grammars, stock simulator ----------------------------------------------------------------------------
@pytest.mark.parametrize("grammar,steps,trials,fast,more", [
    ("ambiguous", 70, 1, True, ()), ("tiny_sql", 12, 2, False, ()), ("nullable", 12, 2, False, ()),
    ("ambiguous", 136, 1, True, ("--only", "ATOM", "--device-from", 126))])
def test_step_kernel_equals_cpu_step(grammar, steps, trials, fast, more):
    """The shared chart step on the device (one block of 4 threads) writes the same words as on the CPU; the
    ambiguous walk passes 64 terminals (rows of two words; on the faster scheduler, the stock one takes 30 s); a
    run of atoms past 128 terminals (columns of three words, filled: the step's skips, the early end of its split
    loop and the unfiltered rows apply), compared from 126 on."""
    out = _case("step", "--grammar", grammar, "--steps", steps, "--trials", trials, "--threads", 4,
                *(["--fast"] if fast else []), *map(str, more))
    assert int(out.split()[0]) >= steps - (more[-1] if more else 0)


#: (grammar, workers, bfs_depth, fast): the S-expression grammar's longer searches on the faster scheduler (stock:
#: 45 s; the two schedulers are held equal by test_fast_scheduler_gives_the_same_results)
KERNEL_CASES = [("ambiguous", 3, 1, False), ("tiny_sql", 3, 1, False), ("ambiguous", 1, 0, False),
                ("nullable", 2, 2, False), ("sexpr", 2, 1, True)]


@pytest.mark.parametrize("grammar,workers,bfs_depth,fast", KERNEL_CASES)
def test_cuda_simulator_equals_cpu(grammar, workers, bfs_depth, fast):
    """Searches (all nodes and the needed ones) and masks along samples, BFS levels then DFS, 4 threads a block."""
    _case("search", "--grammar", grammar, "--workers", workers, "--bfs-depth", bfs_depth, "--threads", 4,
          *(["--fast"] if fast else []))


@pytest.mark.parametrize("grammar,bfs_depth", [("overlap", 2), ("sexpr", 1), ("classes", 2)])
def test_cuda_simulator_equals_cpu_merged_boundaries(grammar, bfs_depth):
    """The same with most tokens aligned on merged boundaries (``token_states=1``): merged nodes viable by their
    edges and given a lattice step in the BFS levels and in the DFS (faster scheduler: the stock one took 45-60 s).
    On ``classes`` a piece of a merged boundary spans a node that is not viable ("ca;" at the start: "c" is a NAME,
    "ca" a keyword): the DFS gives that node its chart and walks it unemitted (the BFS levels stop above it)."""
    out = _case("search", "--grammar", grammar, "--workers", 2, "--bfs-depth", bfs_depth, "--threads", 4,
                "--token-states", 1, "--fast")
    assert "merged nodes" in out


def test_fast_scheduler_gives_the_same_results():
    """The faster simulator scheduler used for Qwen3-size inputs runs the same search case to the same end."""
    _case("search", "--grammar", "tiny_sql", "--workers", 3, "--bfs-depth", 2, "--threads", 4, "--fast")
    _case("search", "--grammar", "tiny_sql", "--workers", 2, "--bfs-depth", 1, "--threads", 1, "--fast")


def test_bfs_growing_past_its_first_guess_keeps_device_tiers():
    """Issue 13's defect: the BFS builds more than 64 charts (110 at the second level of the digits grammar),
    which made the old host loop reallocate a zeroed device arena mid-search and lose the first level's tiers
    (its CUDA mask had 111 tokens where the CPU's has 1111). Now the arena is sized before a search starts."""
    stats = json.loads(_case("grow", "--workers", 2, "--threads", 2, "--fast"))
    assert stats["bfs_nodes_max"] > 64


def test_launches_and_copies_per_mask():
    """Device-resident search: per search at most bfs_depth + 1 launches, one job copy and at most one arena copy
    to the device, one flags copy back; commits touch the device not at all; each committed word is copied once."""
    out = json.loads(_case("counts", "--bfs-depth", 2, "--workers", 3, "--threads", 2, "--fast"))
    assert out["max_launches_per_mask"] <= 3 * out["searches"] and out["d2h"] == out["searches"]


# -- Qwen3-size inputs, fast scheduler --------------------------------------------------------------------------
SPIDER_Q = "SELECT T1.name, count(*) FROM singer AS T1 JOIN concert AS T2 ON T1.id = T2.sid WHERE T2.year > 2014"
QWEN3_CASES = [
    # dataset, tokens committed first, masks compared, workers, bfs_depth, threads
    ("spider", 0, 8, 4, 2, 4),
    ("spider", 8, 6, 8, 6, 2),       # a deep BFS (up to depth 6: the most charts a real Spider step gives, ~50)
    ("spider_spop", 0, 8, 4, 2, 4),
    ("treebank", 20, 5, 4, 2, 4),    # prefixes of 20-25 tags: the TreeBank grammar's 3,155 rules
]


@pytest.mark.slow
@pytest.mark.parametrize("dataset,skip,steps,workers,bfs_depth,threads", QWEN3_CASES)
def test_qwen3_simulator_equals_cpu(dataset, skip, steps, workers, bfs_depth, threads, request):
    """Real grammars with the Qwen3 vocabulary (151,936 tokens): every CUDA mask equals the CPU mask. (The SQL
    grammars ship with the project; TreeBank's is induced from the downloaded trees.)"""
    out = json.loads(_case("qwen3", "--dataset", dataset, "--skip", skip, "--steps", steps, "--workers", workers,
                           "--bfs-depth", bfs_depth, "--threads", threads, "--text", SPIDER_Q,
                           "--data-root", _root(dataset, request), "--fast"))
    assert out["masks"] >= steps and out["searches"] >= 1


def _root(dataset: str, request) -> str:
    """The data root; only TreeBank needs the downloaded data (the fixture skips, saying so, without it)."""
    return str(request.getfixturevalue("data_root")) if dataset == "treebank" else "."


# -- the same on a real GPU (pytest -m gpu) ---------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("grammar,workers,bfs_depth", [c[:3] for c in KERNEL_CASES] + [("tiny_sql", 132, 2)])
def test_cuda_device_equals_cpu(grammar, workers, bfs_depth):
    """Searches and masks along samples on a real GPU (128 threads a block) equal the CPU backend's."""
    require_gpu()
    _case("search", "--grammar", grammar, "--workers", workers, "--bfs-depth", bfs_depth, "--threads", 128,
          simulator=False)


@pytest.mark.gpu
@pytest.mark.parametrize("grammar", ["ambiguous", "tiny_sql"])
def test_cuda_device_step_equals_cpu(grammar):
    require_gpu()
    _case("step", "--grammar", grammar, "--steps", 70, "--trials", 3, "--threads", 128, simulator=False)


@pytest.mark.gpu
def test_cuda_device_defect_and_counts():
    require_gpu()
    assert json.loads(_case("grow", "--workers", 32, "--threads", 128, simulator=False))["bfs_nodes_max"] > 64
    _case("counts", "--bfs-depth", 2, "--workers", 32, "--threads", 128, simulator=False)


@pytest.mark.gpu
@pytest.mark.parametrize("dataset,skip,steps", [("spider", 0, 30), ("spider_spop", 0, 30), ("treebank", 0, 40)])
def test_cuda_device_qwen3_masks_equal_cpu(dataset, skip, steps, request):
    """Real grammars, Qwen3 vocabulary, on a real GPU: every mask of a prefix equals the CPU backend's."""
    require_gpu()
    _case("qwen3", "--dataset", dataset, "--skip", skip, "--steps", steps, "--workers", 64, "--bfs-depth", 2,
          "--threads", 128, "--text", SPIDER_Q, "--data-root", _root(dataset, request), simulator=False, timeout=900)

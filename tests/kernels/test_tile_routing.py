"""The many-row integer tile kernel's routing decisions (libstrata/src/cuda/cuda_int_tiles_route.cuh), checked on
the CPU: the header is plain C++, so libstrata/cuda_emu/test_tile_route.cpp compiles it with g++ and answers
queries. No choice changes a bit (the device tests in test_int_tiles.py compare them); what this file pins is
which configuration a call gets, i.e. what the timings in bench/RESULTS.md were taken on: routing v10 trades the
128 x 128 tiles for 128 x 64 ones only where those put less work on the busiest SM, only for Q4_0 and Q6_K, and
leaves the one-wave matrices alone; the tail split takes a few rows off where it pays and nowhere else.
Shapes: Llama-3.1-8B and Llama-3.2-1B projections on GPUs of 132 SMs (the H100 and H200 measured)."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
Q4_0, Q8_0, Q4_1, Q4_K, Q6_K = 2, 8, 3, 12, 14  # strata_dtype values (libstrata/include/strata.h)
SMS = 132
GATE_UP, LM_HEAD, GATE_UP_1B = (28672, 4096), (49152, 4096), (16384, 2048)
ONE_WAVE = [(4096, 4096), (1024, 4096), (6144, 4096), (4096, 14336), (2048, 2048), (3072, 2048), (2048, 8192)]
SHAPE_128x64, SHAPE_128x128 = 0, 3


@pytest.fixture(scope="module")
def router(tmp_path_factory):
    """Queries to the compiled routing: a list of query lines in, their answer lines out."""
    if shutil.which("g++") is None:
        pytest.skip("needs g++ to build the routing driver")
    exe = tmp_path_factory.mktemp("route") / "test_tile_route"
    src = ROOT / "libstrata"
    build = subprocess.run(["g++", "-std=c++17", "-O1", "-Wall", "-Werror", f"-I{src / 'src' / 'cuda'}",
                            f"-I{src / 'include'}", str(src / "cuda_emu" / "test_tile_route.cpp"), "-o", str(exe)],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-4000:]

    def ask(queries):
        run = subprocess.run([str(exe)], input="\n".join(queries) + "\n", capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
        out = run.stdout.splitlines()
        assert len(out) == len(queries)
        return out

    return ask


def shapes(router, routing, n_out, k, rows, dtype=Q4_0, forced=False, tail_most=32):
    """The tile shape each row count gets (-1: the older kernels)."""
    out = router([f"choose {routing} {int(forced)} {r} {n_out} {k} {dtype} {SMS} {tail_most}" for r in rows])
    return {r: int(line.split()[1]) if line != "-1" else -1 for r, line in zip(rows, out)}


@pytest.mark.parametrize("matrix,rows", [(GATE_UP, [401, 416, 448]), (LM_HEAD, [161, 176, 320, 448]),
                                         (GATE_UP_1B, [320, 416, 448])])
def test_v10_takes_128x64_where_a_128_row_tile_is_half_empty(router, matrix, rows):
    """Where v9 takes 128 x 128 and the last row tile is about half empty, v10 takes 128 x 64 (H100: −9 to −16 %)."""
    assert set(shapes(router, 9, *matrix, rows).values()) == {SHAPE_128x128}
    assert set(shapes(router, 10, *matrix, rows).values()) == {SHAPE_128x64}


@pytest.mark.parametrize("matrix,rows", [(GATE_UP, [387, 480, 512]), (LM_HEAD, [200, 256, 512]),
                                         (GATE_UP_1B, [200, 288, 512])])
def test_v10_keeps_128x128_at_equal_work_and_where_its_split_does_as_well(router, matrix, rows):
    """Equal work keeps 128 x 128 (512 rows); so does 387 rows of gate_up, where 128 x 128's tail split (384 rows
    on their own route + 3 off the tiles) does as well as 128 x 64 whole, and the 1B gate_up at 200 and 288 rows,
    where the rule's first form took 128 x 64 and measured 4-6 % slower."""
    assert set(shapes(router, 10, *matrix, rows).values()) == {SHAPE_128x128}


def test_v10_changes_nothing_on_the_one_wave_matrices(router):
    """q/o, k/v, qkv and down (8B and 1B) get the same configuration under v9 and v10 at every row count."""
    rows = list(range(1, 600, 7))
    for n_out, k in ONE_WAVE:
        for dtype in (Q4_0, Q6_K):
            assert shapes(router, 9, n_out, k, rows, dtype) == shapes(router, 10, n_out, k, rows, dtype), (n_out, k)


@pytest.mark.parametrize("dtype,shape", [(Q4_0, SHAPE_128x64), (Q6_K, SHAPE_128x64), (Q4_K, SHAPE_128x128),
                                         (Q8_0, SHAPE_128x128), (Q4_1, SHAPE_128x128)])
def test_v10_applies_to_the_types_it_was_measured_on(router, dtype, shape):
    """Q4_0 and Q6_K take v10's 128 x 64 tiles; Q4_K (measured slower there), Q8_0 and Q4_1 (untimed) keep v9's."""
    assert shapes(router, 10, *GATE_UP, [448], dtype)[448] == shape


def test_forced_routing_runs_the_tiles_at_every_row_count(router):
    """tiles:v10 (forced) gives the tile kernel even one row; auto leaves one row to the older kernels."""
    assert shapes(router, 10, *GATE_UP, [1], forced=True)[1] >= 0
    assert shapes(router, 10, *GATE_UP, [1])[1] == -1


def tail(router, rows, n_out, k, tail_most=32, routing=10, dtype=Q4_0):
    head_rows, head_shape, tail_rows, tail_shape = router(
        [f"tail {rows} {n_out} {k} {dtype} {SMS} {tail_most} {routing}"])[0].split()
    return int(head_rows), int(head_shape), int(tail_rows), int(tail_shape)


def test_tail_split_where_it_pays(router):
    """A 131-row call on 16,384 outputs: 128 rows on the 128-row tiles, 3 off the tiles (the launch count
    test_int_tiles.py checks on the device); 387 rows of gate_up (serve_load's prompt steps): 384 on 128 x 64, 3
    off the tiles; with the split off (0) or below the tail's rows (2), no split."""
    assert tail(router, 131, 16384, 2048, 8) == (128, SHAPE_128x128, 3, -1)
    assert tail(router, 387, *GATE_UP) == (384, SHAPE_128x64, 3, -1)
    assert tail(router, 131, 16384, 2048, 0)[2] == 0
    assert tail(router, 131, 16384, 2048, 2)[2] == 0


def test_no_tail_split_where_it_cannot_pay(router):
    """65 rows on 256 outputs: one wave either way, so no split; 200 rows of the 1B gate_up on 128 x 128: the 72
    last rows are more than the tail's 32."""
    assert tail(router, 65, 256, 2048, 8)[2] == 0
    assert tail(router, 200, *GATE_UP_1B)[2] == 0

"""scripts/sass_mix.py reads nvdisasm's listing: kernels, opcodes without predicates, labels and backward
branches, and the loop that holds the most tensor-core instructions (its cost per mma). The listing below is
cut from the real one of cuda_int_mma_tiles.cu (nvdisasm 13, sm_90), with a two-mma loop, an inner loop of
none and a forward branch."""

import pytest

from script_module import load_script

LISTING = """\
\t.target\tsm_90
.text._ZN6strata4cuda6kernelILi2EEEvv:
        .type           _ZN6strata4cuda6kernelILi2EEEvv,@function
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/              @!P1 BRA `(.L_x_10) ;
.L_x_11:
        /*0020*/                   LDS R4, [R2] ;
        /*0030*/                   IMMA.16832.U8.S8 R8, R4.ROW, R6.COL, R8 ;
        /*0040*/                   FADD R9, R8, -R12 ;
        /*0050*/                   FMUL R10, R13, R14 ;
        /*0060*/                   FFMA R20, R10, R9, R20 ;
.L_x_12:
        /*0070*/                   IADD3 R3, R3, 0x1, RZ ;
        /*0080*/              @P2 BRA `(.L_x_12) ;
        /*0090*/                   IMMA.16832.U8.S8 R8, R4.ROW, R7.COL, R8 ;
        /*00a0*/                   FADD R9, R8, -R12 ;
        /*00b0*/               @P0 BRA `(.L_x_11) ;
.L_x_10:
        /*00c0*/                   EXIT ;
.text._ZN6strata4cuda6kernelILi8EEEvv:
        /*0000*/                   IGMMA.64x64x32.S8.S8 R56, R24, gdesc[UR16], RZ, !UPT, gsb0 ;
        /*0010*/                   EXIT ;
"""


@pytest.fixture(scope="module")
def sass():
    return load_script("scripts/sass_mix.py")


def test_kernels_opcodes_labels_and_branches(sass):
    first, second = sass.parse_sass(LISTING)
    assert first.name == "_ZN6strata4cuda6kernelILi2EEEvv" and second.name.endswith("ILi8EEEvv")
    assert first.opcodes[:3] == ["LDC", "BRA", "LDS"]  # the predicate @!P1 is not an opcode
    assert first.labels == {".L_x_11": 2, ".L_x_12": 7, ".L_x_10": 12}
    assert first.branches == [(1, ".L_x_10"), (8, ".L_x_12"), (11, ".L_x_11")]
    assert second.opcodes == ["IGMMA.64x64x32.S8.S8", "EXIT"] and second.mma_positions() == [0]


def test_the_loop_with_the_most_mmas_and_its_cost_per_mma(sass):
    kernel = sass.parse_sass(LISTING)[0]
    loop = sass.hottest_loop(kernel)
    assert loop == (2, 11)  # .L_x_11 .. its backward branch; the inner loop holds no mma, the forward one is none
    n, mmas, mix = sass.loop_mix(kernel, loop)
    assert (n, mmas) == (10, 2)
    assert mix["FADD"] == 1.0 and mix["IMMA"] == 1.0 and mix["FMUL"] == 0.5 and mix["BRA"] == 1.0


def test_no_loop_no_figure(sass):
    assert sass.hottest_loop(sass.parse_sass(LISTING)[1]) is None


def test_main_reads_a_listing(sass, tmp_path, capsys):
    listing = tmp_path / "k.sass"
    listing.write_text(LISTING)
    assert sass.main([str(listing), "--kernel", "ILi2E"]) == 0
    out = capsys.readouterr().out
    assert "10 instructions, 2 tensor-core, 5.0 per one" in out
    assert sass.main([str(listing), "--kernel", "nothing"]) == 1

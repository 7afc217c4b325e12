"""bench/gpu_matmul.py's --int-kernels values: what it accepts must be what libstrata accepts
(STRATA_INT_MATMUL, cuda_int_mma_tiles.cu's parse_forced and routings), so an A/B on the device never
stops on a value the library takes, nor times the wrong kernel on one it refuses."""

import pytest

from script_module import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("bench/gpu_matmul.py", "gpu_matmul_bench")


@pytest.mark.parametrize("value", ["auto", "auto:v8", "auto:v9", "tiles:v9", "auto:v10", "tiles:v10", "legacy", "rows:32", "tiles:32",
                                   "tiles:32x64d2", "tiles:128x128d2o", "tiles:128x48d0o", "tiles:32x64d2k",
                                   "tiles:32x64d2ok", "tiles:64x64d2k"])
def test_library_values_are_accepted(bench, value):
    assert bench.int_kernel_values([value]) == [value]


@pytest.mark.parametrize("value", ["auto:v11", "tiles:v11", "auto:v01", "auto:v0", "tiles:32x64d1k", "tiles:128x64d2k", "tiles:32x64d2ko",
                                   "tiles:32x64d1o", "tiles:128x48d1o", "tiles:64x48d0", "tiles:96"])
def test_values_the_library_refuses_are_refused(bench, value):
    with pytest.raises(SystemExit, match="is not a STRATA_INT_MATMUL value"):
        bench.int_kernel_values([value])


def test_shorthands_expand_to_every_routing_and_configuration(bench):
    routings = bench.int_kernel_values(["routings"])
    assert routings[0] == "legacy" and routings[-1] == "tiles:v10"
    configs = bench.int_kernel_values(["configs"])
    assert "tiles:32x64d2ok" in configs and "tiles:128x128d2o" in configs and "tiles:128x48d0o" in configs
    assert len(configs) == len(set(configs))


def test_the_environment_picks_the_kernel_when_the_option_is_absent(bench):
    """scripts/gpu_ab.sh A/Bs a STRATA_INT_MATMUL value by setting it for the run: without --int-kernels the
    benchmark times that value (it once overrode it with auto, so both columns timed the same routing)."""
    assert bench.chosen_int_kernels(None, {"STRATA_INT_MATMUL": "auto:v9"}) == ["auto:v9"]
    assert bench.chosen_int_kernels(None, {}) == ["auto"]
    assert bench.chosen_int_kernels(None, {"STRATA_INT_MATMUL": ""}) == ["auto"]
    assert bench.chosen_int_kernels(["tiles:v10"], {"STRATA_INT_MATMUL": "auto:v9"}) == ["tiles:v10"]
    with pytest.raises(SystemExit, match="is not a STRATA_INT_MATMUL value"):
        bench.chosen_int_kernels(None, {"STRATA_INT_MATMUL": "auto:v11"})

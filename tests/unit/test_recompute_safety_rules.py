"""cause/safety.py without MindSpore: which ops take code, and the size of what a recompute computes."""
from msoverflow.cause import safety


def test_ops_that_take_code_are_named_with_the_reason():
    assert "runs code" in safety.takes_code("Custom")
    assert "runs code" in safety.takes_code("Custom_divide_7bc51c98")
    assert "runs code" in safety.takes_code("PyFunc")
    assert "func" in safety.takes_code("Anything", 'func_type: "aot", func: "dump/payload.cc:Fn"')
    assert "file" in safety.takes_code("Anything", 'file: "kernel.so", x: I64(1)')
    assert safety.takes_code("MatMul", "transpose_a: Bool(0), transpose_b: Bool(1)") is None
    assert safety.takes_code("Softmax", "axis: (I64(-1))") is None


def test_the_shape_a_recompute_computes_is_counted_from_its_inputs_and_arguments():
    assert safety.produced_elements("MatMul", [(12000, 16), (16, 12000)], {}) == 12000 * 12000 + 2 * 12000 * 16
    assert safety.produced_elements("MatMul", [(12000, 16), (12000, 16)], {"transpose_b": True}) \
        == 12000 * 12000 + 2 * 12000 * 16
    assert safety.produced_elements("Tile", [(2, 2)], {"multiples": [4000, 4000]}) == 8000 * 8000
    assert safety.produced_elements("Add", [(4000, 1), (1, 4000)], {}, pointwise=True) == 4000 * 4000
    assert safety.produced_elements("Softmax", [(8, 16)], {}) is None
    assert safety.over_budget("Tile", 4, 64_000_000, 2) is not None
    assert safety.over_budget("Add", 8, 8, 3) is None

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


def _origin(tmp_path, op_type, arrays, dumped):
    """An op run of npy files (input slots in order, output 0) as the walk makes them."""
    import numpy as np

    from msoverflow.model import OpExecution, TensorEvent

    def event(name, io, slot, array):
        path = tmp_path / f"{name}.npy"
        np.save(path, array)
        return TensorEvent(source=str(path), rank=0, graph="0", step=0, op_type=op_type, op_name=f"{op_type}-op1",
                           task_id=0, stream_id=0, timestamp=1, io=io, slot=slot, dtype=array.dtype.name)
    return OpExecution(0, "0", 0, op_type, f"{op_type}-op1", 0, 0,
                       inputs=[event(f"in{slot}", "input", slot, a) for slot, a in enumerate(arrays)],
                       outputs=[event("out0", "output", 0, dumped)])


def test_a_bias_add_is_counted_by_the_shape_its_bias_broadcasts_to(tmp_path):
    """Fuzz find (corpus recompute-memory-bias-add-broadcast.bin): a (3000, 1) input and a (3000, 16) bias make
    3000 x 48000; the budget counted the dumped 5x1x4 output and the recompute took 2.8 GB."""
    import numpy as np

    from msoverflow.cause.cause import diagnose
    from msoverflow.evaluate import TensorAccess
    assert safety.produced_elements("BiasAdd", [(3000, 1), (3000, 16)], {}, pointwise=True) == 3000 * 48000
    assert safety.produced_elements("BiasAdd", [(8, 4), (4,)], {}, pointwise=True) == 32
    assert safety.produced_elements("LayerNorm", [(3000, 1), (1, 3000), (1,)], {}, pointwise=True) == 3000 * 3000
    dumped = np.full((5, 1, 4), np.inf, np.float32)
    ex = _origin(tmp_path, "BiasAdd", [np.ones((3000, 1), np.float32), np.ones((3000, 16), np.float32)], dumped)
    cause = diagnose(ex, TensorAccess(lambda message: None), mindspore=False)
    assert cause.cause == "unknown" and "BiasAdd would compute" in cause.reason
    assert "results 144,000,000 x 2 precisions" in cause.reason


def test_an_argument_the_saved_graph_gives_as_inf_is_an_unknown_cause(tmp_path):
    """Fuzz find (corpus recompute-OverflowError-softmax-axis-inf.bin): Softmax's axis literal F32(inf) raised
    OverflowError out of the recompute."""
    import numpy as np

    from msoverflow.cause.cause import diagnose
    from msoverflow.evaluate import TensorAccess
    from msoverflow.model import GraphNode
    ex = _origin(tmp_path, "Softmax", [np.ones((2, 3), np.float32)], np.full((2, 3), np.nan, np.float32))
    node = GraphNode("Default/Softmax-op1", "Softmax", literals={1: "F32(inf)"})
    cause = diagnose(ex, TensorAccess(lambda message: None), node=node, mindspore=False)
    assert cause.cause == "unknown"
    assert "Softmax could not be recomputed" in cause.reason and "OverflowError" in cause.reason


def test_a_tensor_input_the_saved_graph_gives_as_no_number_is_an_unknown_cause(tmp_path):
    """Fuzz find (corpus recompute-ValueError-literal-input-NCHW.bin): an op whose input 0 the saved graph gives
    as the literal "NCHW" raised ValueError out of the recompute."""
    import numpy as np

    from msoverflow.cause.cause import diagnose
    from msoverflow.evaluate import TensorAccess
    from msoverflow.model import GraphNode
    ex = _origin(tmp_path, "Add", [np.ones((3, 3), np.float32)], np.full((3, 3), np.inf, np.float32))
    ex.inputs[0].slot = 1               # input 1 dumped, input 0 a literal of the saved graph
    node = GraphNode("Default/Add-op1", "Add", literals={0: '"NCHW"'})
    cause = diagnose(ex, TensorAccess(lambda message: None), node=node, mindspore=False)
    assert cause.cause == "unknown"
    assert "input 0 is given by the saved graph as '\"NCHW\"', not a number" in cause.reason

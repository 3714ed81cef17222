"""comparison/names.py: which framework a mindstudio-probe dump's entries name, and --map entries across
frameworks (an entry joins the family of its baseline API name; a pattern is a family of its own)."""
from msoverflow.comparison.names import NameMap, family, framework_of


def test_framework_is_told_by_the_prefixes_only_one_framework_writes():
    assert framework_of(["Functional.linear.0.forward", "Torch.matmul.0.forward", "Tensor.__mul__.0.forward"]) \
        == "pytorch"
    assert framework_of(["Primitive.matmul.MatMul.0.forward", "Tensor.to.0.forward", "Mint.add.0.forward"]) \
        == "mindspore"
    # Functional and Tensor are both frameworks' names; graph kernels have no prefix at all
    assert framework_of(["Functional.softmax.0.forward", "Tensor.__mul__.0.forward"]) is None
    assert framework_of(["Default/network-Net/MatMul-op0"]) is None


def test_a_map_entry_puts_runs_in_the_family_of_its_baseline_api_name():
    table = NameMap([("Functional.dense", "Functional.linear"), ("Functional.mse_loss", "Functional.mse_loss"),
                     ("Primitive.*.Gelu*", "Functional.gelu")])
    assert table.family_of(("Functional.linear", "Functional.linear"), "target") == "MatMul" == \
        family("MatMul", "Primitive.matmul.MatMul.0.forward")
    # an entry whose other name is not in the dump takes nothing from a run's own family
    assert table.family_of(("Functional.square", "Square"), "baseline") is None
    assert table.family_of(("Primitive.gelu.GeluV2", "GeluV2"), "baseline") == "map2" == \
        table.family_of(("Functional.gelu", "Functional.gelu"), "target")

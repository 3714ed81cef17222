"""The script `msoverflow repro` writes, loaded as a module without MindSpore: how it words an error."""
import importlib.util

import pytest

from msoverflow import repro


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    path = tmp_path_factory.mktemp("repro") / "repro.py"
    path.write_text(repro.SCRIPT.replace("__SPEC__", "{}").replace("__DEVICE__", "CPU"))
    spec = importlib.util.spec_from_file_location("written_repro", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)          # numpy only at import; MindSpore is imported by main()
    return module


def _raised(exc):
    try:
        raise exc
    except Exception as caught:     # noqa: BLE001 - the script's own handler catches everything
        return caught


@pytest.mark.parametrize("message,expected", [
    ("\n----------------------------------------------------\n- Kernel select failed:\n---\nSqrt has no BFloat16",
     "TypeError: - Kernel select failed:"),
    ("For primitive[SGD], the input argument[parameters] must be a type of {Tensor[Float16], Tensor[Float32]}, "
     "but got Tensor[BFloat16].",
     "TypeError: For primitive[SGD], the input argument[parameters] must be a type of {Tensor[Float16], "
     "Tensor[Float32]}, but got Tensor[BFloat16]."),
])
def test_error_text_is_the_first_line_that_says_something(script, message, expected):
    assert script.error_text(_raised(TypeError(message))) == expected


def test_an_error_without_a_message_says_where_it_was_raised(script):
    text = script.error_text(_raised(TypeError()))
    assert text.startswith("TypeError: no message; raised in test_repro_script.py:") and "(_raised)" in text


def test_a_long_message_is_cut_between_words(script):
    text = script.error_text(_raised(RuntimeError("word " * 200)))
    assert text.endswith("word ...") and len(text) < 330


def test_forward_inputs_are_rebuilt_by_named_rules(script):
    assert set(script.REBUILD) == {form["rebuild"] for form in repro.VJP_FORMS.values()}
    assert script.REBUILD["square"](3.0) == 9.0 and script.REBUILD["reciprocal_square"](2.0) == 0.25

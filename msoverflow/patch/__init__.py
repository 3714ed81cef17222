"""Precision patches for the region where an overflow was born: at run time (`apply`), in a MindFormers YAML,
or in the model's source; `verify` re-runs the training with dump on and compares before/after.

Importing this package does not import MindSpore; `apply` does, when called.
"""
from .targets import SourceLocation, Target, load_report, target_from_args, target_from_report  # noqa: F401


def apply(network, target, dtype="float32", **kwargs):
    """Build a float32/bfloat16 island around `target` in `network`; see msoverflow.patch.runtime.apply."""
    from .runtime import apply as _apply
    return _apply(network, target, dtype, **kwargs)

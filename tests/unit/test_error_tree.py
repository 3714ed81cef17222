"""One documented exception tree (msoverflow/errors.py) and typed tensor statuses (model.Status): a reader says
what is wrong with a file by the class it raises, so completeness and the walk never read the readers' English.
Files are SYNTHETIC npy files (tests/support/synth_dump.py) cut the way a killed writer cuts them, and binary DumpData
files SPEC-BUILT from the documented format (tests/support/ascend_fixtures.py)."""
import os

import numpy as np
import pytest

from msoverflow import errors
from msoverflow.errors import FormatError, TruncatedFile, UserError
from msoverflow.evaluate import TensorAccess
from msoverflow.model import Status
from msoverflow.readers import _protobuf, dumpdata_bin, npy, opdebug
from msoverflow.selection import SelectionError
from msoverflow.strategy_checkpoint import StrategyError
from tests.support.synth_dump import SynthDump


def test_every_format_error_is_a_format_error_and_a_value_error():
    for cls in (npy.NpyError, dumpdata_bin.DumpFormatError, opdebug.OpdebugFormatError, _protobuf.ProtobufError,
                StrategyError, TruncatedFile):
        assert issubclass(cls, FormatError) and issubclass(cls, ValueError), cls
    assert issubclass(npy.TruncatedNpy, npy.NpyError) and issubclass(npy.TruncatedNpy, TruncatedFile)
    assert issubclass(dumpdata_bin.TruncatedDump, TruncatedFile)
    assert issubclass(SelectionError, UserError) and not issubclass(FormatError, UserError)
    assert all(issubclass(FormatError, cls) or cls is OSError for cls in errors.READ_ERRORS)


def _npy(tmp_path, cut_to=None):
    path = SynthDump(str(tmp_path)).tensor(0, "Add", "Default_Add-op1", "output", 0, np.ones(64, np.float32))
    if cut_to is not None:
        with open(path, "r+b") as fh:
            fh.truncate(cut_to)
    return path


@pytest.mark.parametrize("cut_to", [0, 7, 100])
def test_a_cut_npy_file_raises_truncated_file(tmp_path, cut_to):
    with pytest.raises(TruncatedFile):
        npy.read_header(_npy(tmp_path, cut_to))


def test_a_corrupt_npy_file_is_a_format_error_not_a_truncated_one(tmp_path):
    path = _npy(tmp_path)
    with open(path, "r+b") as fh:
        fh.write(b"NOTNUMPY")
    with pytest.raises(npy.NpyError) as caught:
        npy.read_header(path)
    assert not isinstance(caught.value, TruncatedFile)


def test_tensor_access_sets_the_status_not_a_note_prefix(tmp_path):
    from msoverflow import walk
    cut = _npy(tmp_path / "cut", cut_to=100)
    corrupt = _npy(tmp_path / "corrupt")
    with open(corrupt, "r+b") as fh:
        fh.write(b"NOTNUMPY")
    for path, status in ((cut, Status.TRUNCATED), (corrupt, Status.UNREADABLE)):
        [unit] = walk.units(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(path)))))
        [event] = walk.unit_events(unit)
        warnings = []
        assert TensorAccess(warnings.append).bad(event) is None
        assert event.status is status and event.status.unread and warnings


def test_a_cut_binary_dump_payload_is_typed(tmp_path):
    from tests.support.ascend_fixtures import build_wild_form
    desc = build_wild_form(str(tmp_path / "dump"), "bf16_bin")
    victim = next(os.path.join(desc["dir"], n) for n in sorted(os.listdir(desc["dir"])) if n.startswith("SqrtGrad."))
    assert dumpdata_bin.read_dump_header(victim).cut is None
    with open(victim, "r+b") as fh:
        fh.truncate(os.path.getsize(victim) - 3)
    header = dumpdata_bin.read_dump_header(victim)
    assert header.cut and "payload truncated" in header.cut
    events = dumpdata_bin.tensor_events(victim, rank=0, graph="0", iteration=0)
    assert Status.TRUNCATED in {e.status for e in events}
    with open(victim, "r+b") as fh:
        fh.truncate(5)
    with pytest.raises(dumpdata_bin.TruncatedDump):
        dumpdata_bin.read_dump_header(victim)

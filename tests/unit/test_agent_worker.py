"""The tool worker's one line for a failure: the memory limit however the system reports it."""
import errno

from msoverflow.agent.worker import _failure


def test_the_memory_limit_is_named_however_the_allocation_failed():
    # (seen: an import listing a package under the limit raised OSError ENOMEM, and the answer said "internal error")
    for exc in (MemoryError(), SystemError("error return without exception set"),
                OSError(errno.ENOMEM, "Cannot allocate memory", "/x/msoverflow/judgement")):
        assert _failure(exc, 1).startswith("ran out of the server's memory limit (1 MB, --memory-mb)"), exc
    other = _failure(OSError(errno.EACCES, "Permission denied", "/x/dump.npy"), 1)
    assert other.startswith("internal error") and "Permission denied" in other

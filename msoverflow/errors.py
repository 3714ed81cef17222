class UserError(Exception):
    """Bad input the user can fix: printed as one line, exit code 2, no traceback."""


class MindSporeMissing(UserError):
    def __init__(self, what: str):
        super().__init__(f"{what} needs MindSpore, which is not installed here "
                         "(pip install 'msoverflow[mindspore]', or run ./scripts/bootstrap.sh)")


def require_mindspore(what: str):
    """Import mindspore lazily; only patch/verify/tracing code calls this."""
    try:
        import mindspore  # noqa: F401
    except ImportError as exc:
        raise MindSporeMissing(what) from exc
    return mindspore

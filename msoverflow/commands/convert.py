"""`msoverflow convert SRC [-o OUTDIR]`: Ascend binary dump files -> npy files named like MindSpore's npy dumps.

Writes only into OUTDIR (never into the dump), keeping SRC's sub-directories so ranks/iterations do not collide.
Binary Opdebug files become the JSON form (`....output.0.json`) that npy-mode dumps write.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import sys

HELP = "convert Ascend binary dump files to npy (writes only into OUTDIR)"


def register(subparsers):
    parser = subparsers.add_parser(
        "convert", help=HELP, description=HELP + ". Output names: "
        "{dump file name}.{input|output}.{slot}.{format}.{DType}.npy (bfloat16 as float32 values, BFloat16 in the name)")
    parser.add_argument("src", metavar="SRC", help="a binary dump file or a directory (searched recursively)")
    parser.add_argument("-o", "--output", metavar="OUTDIR",
                        help="where to write (required for a directory; default for a file: the current directory)")
    parser.set_defaults(run=run)
    from ._output import Paths, Written, declare_paths
    declare_paths(parser, lambda args: Paths((_src_dir(args),), (Written(_out_root(args), "OUTDIR (-o)",
                                                                         directory=True),)))
    return parser


def _src_dir(args) -> str:
    src = os.path.abspath(args.src)
    return src if os.path.isdir(src) else os.path.dirname(src)


def _out_root(args) -> str:
    return os.path.abspath(args.output or os.getcwd())


MAX_FILE_NAME = 255
_NOT_DUMPS = (".npy", ".csv", ".json", ".ir", ".pb", ".txt", ".log", ".dat", ".py", ".yaml", ".yml", ".pt")


def _candidates(src: str):
    """(file, directory relative to SRC) for every file that could be a binary dump."""
    from ..names import METADATA_DIRS
    if os.path.isfile(src):
        yield src, ""
        return
    for current, dirs, files in os.walk(src):
        dirs[:] = sorted(d for d in dirs if d not in METADATA_DIRS)
        for name in sorted(files):
            if name.endswith(_NOT_DUMPS) or name in ("mapping.csv", "statistic.csv"):
                continue
            yield os.path.join(current, name), os.path.relpath(current, src)


def _mapping(directory: str, cache: dict) -> dict:
    if directory not in cache:
        from ..layout import read_mapping
        path = os.path.join(directory, "mapping.csv")
        cache[directory] = read_mapping(path, lambda message: None) if os.path.exists(path) else {}
    return cache[directory]


def _short_name(name: str, target_dir: str, long_names: dict) -> str:
    """A name the file system takes: over MAX_FILE_NAME bytes, a short one listed in mapping.csv (as MindSpore
    does)."""
    if len(os.fsencode(name)) <= MAX_FILE_NAME:
        return name
    short = hashlib.sha1(os.fsencode(name)).hexdigest()[:24] + os.path.splitext(name)[1][:8]
    long_names.setdefault(target_dir, []).append((short, name))
    return short


@contextlib.contextmanager
def _writing(out_root: str):
    """An output that cannot be written (under a file, a name the file system refuses, a full disk) is one line,
    exit 2, naming it."""
    from ..errors import UserError
    try:
        yield
    except OSError as exc:
        where = exc.filename if isinstance(exc.filename, str) else out_root
        raise UserError(f"{where}: cannot write the converted output ({exc.strerror or exc})") from None


def run(args) -> int:
    import csv
    import json

    from .. import names
    from ..errors import UserError
    from ..readers import dumpdata_bin, npy, opdebug

    src = os.path.abspath(args.src)
    if not os.path.exists(src):
        raise UserError(f"{args.src}: no such file or directory")
    if os.path.isdir(src) and not args.output:
        raise UserError(f"{args.src} is a directory: give -o OUTDIR (convert never writes into the dump)")
    out_root = _out_root(args)      # checked against SRC's dump before anything was made (cli.main)

    def say(message):
        if not getattr(args, "quiet", False):     # -q/--quiet: the shared option (msoverflow.logs)
            print(message)

    skipped, written, converted = [], 0, 0
    long_names: dict = {}
    mappings: dict = {}
    from ..safeio import is_regular
    for path, relative in _candidates(src):
        base = os.path.basename(path)
        if not is_regular(path):   # FIFOs, devices, sockets, dangling links: never opened
            skipped.append(f"{path}: not a regular file")
            continue
        original = _mapping(os.path.dirname(path), mappings).get(base, base)
        if "/" in original or "\0" in original or original in (".", ".."):
            original = base   # a mapping.csv name is a file name, never a path out of OUTDIR
        target_dir = os.path.join(out_root, relative)
        if opdebug.is_opdebug_file(original):
            try:
                doc = opdebug.opdebug_as_json(path)
            except opdebug.OpdebugFormatError as exc:
                skipped.append(str(exc))
                continue
            with _writing(out_root):
                os.makedirs(target_dir, exist_ok=True)
                name = _short_name(original + ".output.0.json", target_dir, long_names)
                with open(os.path.join(target_dir, name), "w") as fh:
                    json.dump(doc, fh, indent=2)
            written += 1
            converted += 1
            continue
        parsed = names.parse(original)
        if parsed is not None and parsed.kind == names.KIND_RAW:
            # msprobe's raw tensors (dtypes npy lacks, e.g. BF16) and msaccucmp's .bin: one tensor per file
            from ..readers import raw
            if not raw.decodable(parsed.dtype):
                skipped.append(f"{path}: dtype {parsed.dtype_word} cannot be decoded")
                continue
            word = dumpdata_bin.MINDSPORE_DTYPE_WORDS.get(parsed.dtype, parsed.dtype_word)
            stem = original[:-len(".bin")] if original.endswith(".bin") else original
            if parsed.shape is not None and original.endswith(".bin"):   # msaccucmp: drop shape/dtype/format
                stem = ".".join(stem.split(".")[:-3])
                name = f"{stem}.{parsed.fmt}.{word}.npy"
            else:
                name = ".".join(stem.split(".")[:-1]) + f".{word}.npy"
            with _writing(out_root):
                os.makedirs(target_dir, exist_ok=True)
                name = _short_name(name, target_dir, long_names)
                npy.save(os.path.join(target_dir, name), raw.load_raw(path, parsed.dtype, parsed.shape))
            written += 1
            converted += 1
            continue
        if parsed is None or parsed.kind != names.KIND_BIN:
            skipped.append(f"{path}: not a binary dump file name ({{op_type}}.{{op_name}}.{{task}}.{{stream}}.{{ts}})")
            continue
        try:
            header = dumpdata_bin.read_dump_header(path)
        except dumpdata_bin.DumpFormatError as exc:
            skipped.append(str(exc))
            continue
        with _writing(out_root):
            os.makedirs(target_dir, exist_ok=True)
        wrote_any = False
        for slot in header.slots():
            if not slot.readable:
                skipped.append(f"{path}: {slot.problem}")
                continue
            assert slot.dtype is not None   # readable
            note = dumpdata_bin.layout_note(slot)
            if note:
                say(f"note: {path}: {slot.io} {slot.slot}: {note}")
            word = dumpdata_bin.MINDSPORE_DTYPE_WORDS[slot.dtype]
            # The dump file's own name leads (FFTS+ sub-task ids, _lxslice, a missing stream id all survive);
            # bf16 is written as float32 values with BFloat16 kept in the name, as MindSpore and msprobe do.
            name = _short_name(f"{original}.{slot.io}.{slot.slot}.{slot.format_name}.{word}.npy", target_dir,
                               long_names)
            with _writing(out_root):
                npy.save(os.path.join(target_dir, name), dumpdata_bin.tensor_view(path, slot))
            written += 1
            wrote_any = True
        converted += wrote_any
    for directory, rows in long_names.items():
        # the original names byte for byte (a name that is not UTF-8 keeps its bytes, as the file system has them)
        with _writing(out_root), open(os.path.join(directory, "mapping.csv"), "a", newline="", encoding="utf-8",
                                      errors="surrogateescape") as fh:
            csv.writer(fh, lineterminator="\n").writerows(rows)
    for reason in skipped:
        print(f"skipped: {reason}", file=sys.stderr)
    print(f"converted {converted} file(s) into {written} file(s) in {out_root}; skipped {len(skipped)}")
    if converted == 0:
        raise UserError(f"{args.src}: no readable binary dump file found"
                        + (f" ({len(skipped)} skipped, see above)" if skipped else ""))
    return 0

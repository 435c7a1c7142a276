"""``loaderx-convert SOURCE ROOT``: convert a Hub dataset, a save_to_disk folder or parquet files.

Exit statuses (``zrecord.console``): 0 published, 1 the dataset cannot be converted
as asked, 2 usage, 3 the system failed (I/O, the Hub or the network, memory), 130 Ctrl-C,
141 the reader of the output went away.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys

import zrecord
from loaderx_converter import (
    ConversionError,
    HubError,
    UnsafePathError,
    __version__,
    convert,
    from_local,
    huggingface,
)
from zrecord.console import (
    EXIT_OK,
    EXIT_RUNTIME,
    EXIT_USAGE,
    HelpFormatter,
    epilog,
    paragraph,
    run_tool,
    say,
)

EXIT_UNCONVERTIBLE = 1  # the dataset cannot be converted as asked; running again won't help
# The exit statuses of --help (zrecord.console.STATUSES_COMMON follow).
STATUSES = [
    (EXIT_OK, "success: ROOT is published"),
    (EXIT_UNCONVERTIBLE, "the dataset cannot be converted as asked (unsupported feature, null,\n"
                         "unsafe split or column name, bad option value, ROOT exists)"),
    (EXIT_USAGE, "usage error (unknown option, missing argument, unreadable --dict file)"),
    (EXIT_RUNTIME, "the system failed (I/O error, the Hub or the network, out of memory)"),
]


def _unsafe_name_message(exc: UnsafePathError) -> str:
    """The way out of an unusable split or column name from the command line."""
    if exc.column is not None:
        return (f"split {exc.split!r} column {exc.column!r}: the column name {exc.reason}; "
                "leave the column out with --columns (a comma-separated list of the columns "
                "to keep), or rename it in Python (dataset.rename_column) and convert with "
                "loaderx_converter.convert")
    if exc.split is not None:
        return (f"the split name {exc.split!r} {exc.reason}; rename the split in Python "
                "(e.g. DatasetDict({'train': dataset[name]})) and convert with "
                "loaderx_converter.convert")
    return str(exc)


def _read_dict(path: str) -> bytes:
    """An argparse type: the bytes of the --dict file (an unreadable file is a usage error)."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot read {path!r}: {exc.strerror or exc}") from None


def _version() -> str:
    """This package's version and those of zrecord and datasets it runs with. The version of
    datasets comes from its metadata: importing it takes seconds."""
    try:
        datasets_version = importlib.metadata.version("datasets")
    except importlib.metadata.PackageNotFoundError:
        datasets_version = "not installed"
    return (f"loaderx-convert (loaderx-converter) {__version__}, zrecord {zrecord.__version__}, "
            f"datasets {datasets_version}")


_EXAMPLES = [
    ("loaderx-convert ylecun/mnist data/mnist",
     "a Hub dataset, at the commit that main names now"),
    ("loaderx-convert ylecun/mnist data/mnist --revision COMMIT --codec raw",
     "an exact commit (40 hex digits), stored uncompressed"),
    ("loaderx-convert ./saved data/x --columns image,label",
     "two columns of a save_to_disk folder (or parquet file(s))"),
    ("HF_HUB_OFFLINE=1 loaderx-convert ylecun/mnist data/mnist",
     "from the local Hugging Face cache, contacting nothing"),
]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loaderx-convert", formatter_class=HelpFormatter,
        description=paragraph(
            "Convert a Hugging Face dataset into one zrecord store per column under "
            "ROOT/split/column, published at once: ROOT appears only when every store is "
            "written. SOURCE is a Hub repository id, a save_to_disk folder, or parquet "
            "file(s) / a folder of them."),
        epilog=epilog(STATUSES, _EXAMPLES))
    parser.add_argument("source", metavar="SOURCE",
                        help="Hub dataset id (e.g. ylecun/mnist), or a local path: a "
                             "save_to_disk folder, a parquet file or a folder of them")
    parser.add_argument("root", metavar="ROOT",
                        help="destination folder; must not exist, nor lie inside a published "
                             "zrecord store")
    parser.add_argument("--version", action="version", version=_version(),
                        help="print the versions of loaderx-converter, zrecord and datasets "
                             "and exit")
    parser.add_argument("--codec", default="zstd", choices=["raw", "zstd", "zstd_dict"],
                        help="how each record is stored: raw bytes, a zstd frame, or a zstd "
                             "frame made with the dictionary given by --dict")
    parser.add_argument("--dict", dest="dict_bytes", metavar="FILE", type=_read_dict,
                        help="zstd dictionary for --codec zstd_dict (e.g. saved from "
                             "zrecord.train_dict)")
    parser.add_argument("--columns", metavar="A,B,...",
                        help="comma-separated subset of columns (default: all); every split "
                             "and column name becomes a folder, so names with '/', a NUL, a "
                             "leading '.', '..' or too many bytes are refused: leave such "
                             "columns out here")
    parser.add_argument("--revision", default="main",
                        help="branch, tag or commit of a Hub dataset; resolved to a commit, "
                             "recorded in ROOT/provenance.json")
    parser.add_argument("--config", help="dataset configuration name, where it has several")
    parser.add_argument("--endpoint", help="Hub endpoint, e.g. https://hf-mirror.com "
                                           "(default: the Hugging Face Hub)")
    parser.add_argument("--token", help="Hub token for private or gated datasets")
    parser.add_argument("--cache-dir", metavar="DIR",
                        help="Hugging Face cache folder (default: the library's)")
    parser.add_argument("--data-shards", type=int, default=4, metavar="N",
                        help="data files per store, 1 to 255: the write parallelism of each "
                             "store")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    return parser


def _status_of(exc: BaseException) -> int:
    """The exit status for an error: the dataset or the options (1), or the system (3)."""
    if isinstance(exc, HubError):
        return EXIT_RUNTIME  # the Hub, the network or the cache did not deliver
    if isinstance(exc, (ConversionError, FileExistsError)):
        return EXIT_UNCONVERTIBLE  # also ROOT exists: nothing was written
    if isinstance(exc, (MemoryError, OSError)):
        return EXIT_RUNTIME
    return EXIT_UNCONVERTIBLE  # ValueError, KeyError, TypeError: a bad option or column


def _run(argv: list[str] | None) -> int:
    args = _parser().parse_args(argv)
    try:
        if os.path.exists(args.source):
            dataset = from_local(args.source, config=args.config)
        else:
            dataset = huggingface(args.source, revision=args.revision, config=args.config,
                                  token=args.token, endpoint=args.endpoint, cache_dir=args.cache_dir)
        columns = [c for c in args.columns.split(",") if c] if args.columns else None
        record = convert(dataset, args.root, codec=args.codec, columns=columns,
                         dict_bytes=args.dict_bytes, data_shards=args.data_shards,
                         progress=not args.quiet)
    except BrokenPipeError:
        raise  # a progress bar met a closed stderr: run_tool ends the command quietly
    except UnsafePathError as exc:
        say(f"loaderx-convert: error: {_unsafe_name_message(exc)}")
        return EXIT_UNCONVERTIBLE
    except (ConversionError, OSError, MemoryError, ValueError, KeyError, TypeError) as exc:
        # KeyError's str() is the repr of its message; say the message itself.
        text = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        say(f"loaderx-convert: error: {text}")
        return _status_of(exc)
    for split, info in record["splits"].items():
        for column, col in info["columns"].items():
            shape = col.get("item_shape", f"ndim={col.get('ndim')}")
            print(f"{args.root}/{split}/{column}: {col['kind']} {col['dtype']} {shape} "
                  f"x {col['records']}")
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Run the command line and return its exit status.

    With `argv` None this process is the command (the console script, ``python -m
    loaderx_converter.cli``): it reads ``sys.argv``, and Ctrl-C ends the process by SIGINT
    once its one line is printed (see ``zrecord.console``). With a list, nothing
    outside the call is touched and an interrupt returns 130.
    """
    return run_tool("loaderx-convert", lambda: _run(argv), as_program=argv is None)


# The command line is the interface (docs/api/cli.md); in Python, only main() is public.
__all__ = ["main"]


if __name__ == "__main__":
    sys.exit(main())

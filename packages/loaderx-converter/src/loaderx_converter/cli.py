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
from typing import Any

import zrecord
from loaderx_converter import (
    ConversionError,
    HubError,
    OptionError,
    SourceError,
    SourceNotFoundError,
    UnsafePathError,
    WorkerError,
    __version__,
    from_local,
    huggingface,
)
from loaderx_converter._convert import run
from loaderx_converter._hub import is_hub_id
from loaderx_converter._options import DEFAULT_KEY
from loaderx_converter._spelling import CLI
from zrecord.console import (
    EXIT_OK,
    EXIT_RUNTIME,
    EXIT_USAGE,
    HelpFormatter,
    epilog,
    message_of,
    paragraph,
    run_tool,
    say,
)

EXIT_UNCONVERTIBLE = 1  # the dataset cannot be converted as asked; running again won't help
# The exit statuses of --help (zrecord.console.STATUSES_COMMON follow).
STATUSES = [
    (EXIT_OK, "success: ROOT is published"),
    (EXIT_UNCONVERTIBLE, "the dataset cannot be converted as asked (no such SOURCE, unsupported\n"
                         "feature, null, unsafe split or column name, bad option value, ROOT\n"
                         "exists)"),
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


def convert(dataset: Any, root: Any, **options: Any) -> dict[str, Any]:
    """``loaderx_converter.convert`` whose errors name this command's flags (``--columns``,
    ``--codec label=raw``), not the Python keywords."""
    return run(dataset, root, spell=CLI, **options)


def _columns(text: str) -> list[str]:
    """``--columns "image, label"``: names separated by commas, spaces around them ignored."""
    return [name.strip() for name in text.split(",") if name.strip()]


def _codec(text: str) -> tuple[str | None, str]:
    """An argparse type: ``CODEC`` (the default of every column) or ``COLUMN=CODEC``."""
    column, sep, codec = text.rpartition("=")
    codec = codec.strip()
    if codec not in zrecord.CODECS:
        raise argparse.ArgumentTypeError(
            f"{codec!r} is not a codec: {', '.join(zrecord.CODECS)} (one column's: "
            "COLUMN=CODEC)")
    if sep and not column.strip():
        raise argparse.ArgumentTypeError(f"{text!r} names no column before '='")
    return (column.strip() if sep else None), codec


def _read_dict(text: str) -> tuple[str | None, bytes]:
    """An argparse type: ``FILE`` (every zstd_dict column's dictionary) or ``COLUMN=FILE``, read
    now (an unreadable file is a usage error)."""
    column: str | None = None
    path = text
    if not os.path.exists(text) and "=" in text:
        column, path = (part.strip() for part in text.split("=", 1))
    try:
        with open(path, "rb") as f:
            return column, f.read()
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot read {path!r}: {exc.strerror or exc}") from None


def _cast(text: str) -> tuple[str, str]:
    """An argparse type: ``COLUMN=MODE``, an Image column and the Pillow mode to decode it to."""
    import PIL.Image

    column, sep, mode = text.rpartition("=")
    if not sep or not column.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not COLUMN=MODE (e.g. image=RGB)")
    return column.strip(), _mode(mode.strip(), PIL.Image.MODES)


def _image_mode(text: str) -> str:
    import PIL.Image

    return _mode(text.strip(), PIL.Image.MODES)


def _mode(mode: str, known: Any) -> str:
    if mode not in known:
        raise argparse.ArgumentTypeError(f"{mode!r} is not a Pillow image mode (e.g. RGB, RGBA, "
                                         f"L): one of {', '.join(known)}")
    return mode


def _per_column(pairs: list[tuple[str | None, Any]] | None, default: Any) -> Any:
    """[(column or None, value), ...] -> one value, or a dict column -> value with the default
    under "*" (the later of two values for one column wins)."""
    if not pairs:
        return default
    named = {column: value for column, value in pairs if column is not None}
    for column, value in pairs:
        if column is None:
            default = value
    if not named:
        return default
    return {DEFAULT_KEY: default, **named} if default is not None else named


def _apply_casts(dataset: Any, casts: list[tuple[str, str]], image_mode: str | None,
                 columns: list[str] | None) -> Any:
    """--cast COLUMN=MODE and --image-mode MODE: the Image columns cast as datasets casts them
    (their provenance is kept)."""
    import datasets

    splits = dict(dataset.items())
    shared = set.intersection(*(set(ds.column_names) for ds in splits.values()))
    wanted: dict[str, str] = {}
    if image_mode is not None:
        for column in shared:
            if (columns is None or column in columns) and all(
                    isinstance(ds.features[column], datasets.Image) for ds in splits.values()):
                wanted[column] = image_mode
    for column, mode in casts:
        if column not in shared:
            raise OptionError(f"--cast {column}={mode}: no column {column!r} in every split; "
                              f"the columns are {sorted(shared)}")
        feature = next(iter(splits.values())).features[column]
        if not isinstance(feature, datasets.Image):
            raise OptionError(f"--cast {column}={mode}: column {column!r} is {feature!r}, not an "
                              "Image; --cast sets the mode an Image column is decoded to")
        wanted[column] = mode
    for column, mode in wanted.items():
        feature = next(iter(splits.values())).features[column]
        dataset = dataset.cast_column(column, datasets.Image(mode=mode, decode=feature.decode))
    return dataset


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
    ("loaderx-convert ./photos data/photos --images encoded --codec raw",
     "keep each photo's file as it is (decode later, on the loader's threads)"),
    ("loaderx-convert ./photos data/rgb --cast image=RGB --codec label=raw",
     "decode every photo to RGB; labels uncompressed"),
    ("HF_HUB_OFFLINE=1 loaderx-convert ylecun/mnist data/mnist",
     "from the local Hugging Face cache, contacting nothing"),
]


def _parser() -> argparse.ArgumentParser:
    """The command line of loaderx-convert. --help lists the options in the order they are
    added here, so the groups of options are added in that order."""
    parser = argparse.ArgumentParser(
        prog="loaderx-convert", formatter_class=HelpFormatter,
        description=paragraph(
            "Convert a Hugging Face dataset into one zrecord store per column under "
            "ROOT/split/column, published at once: ROOT appears only when every store is "
            "written. SOURCE is a Hub repository id, a save_to_disk folder, or parquet "
            "file(s) / a folder of them."),
        epilog=epilog(STATUSES, _EXAMPLES))
    parser.add_argument("source", metavar="SOURCE",
                        help="Hub dataset id owner/name (e.g. ylecun/mnist), or a local path: "
                             "a save_to_disk folder, a parquet file or a folder of them. A path "
                             "that exists is local; any other SOURCE but a bare owner/name is "
                             "a local path that does not exist")
    parser.add_argument("root", metavar="ROOT",
                        help="destination folder; must not exist, nor lie inside a published "
                             "zrecord store. Or s3://BUCKET/PREFIX: converted in a temporary "
                             "folder, then published there (each store, then provenance.json)")
    parser.add_argument("--version", action="version", version=_version(),
                        help="print the versions of loaderx-converter, zrecord and datasets "
                             "and exit")
    _add_storage_options(parser)
    _add_column_options(parser)
    parser.add_argument("--revision", default="main",
                        help="branch, tag or commit of a Hub dataset; resolved to a commit, "
                             "recorded in ROOT/provenance.json")
    parser.add_argument("--config", help="dataset configuration name, where it has several")
    parser.add_argument("--endpoint", help="Hub endpoint, e.g. https://hf-mirror.com "
                                           "(default: the Hugging Face Hub)")
    parser.add_argument("--token", help="Hub token for private or gated datasets")
    parser.add_argument("--cache-dir", metavar="DIR",
                        help="Hugging Face cache folder (default: the library's)")
    parser.add_argument("--endpoint-url", metavar="URL", default=None,
                        help="for an s3:// ROOT: an S3-compatible server (MinIO, Ceph, R2, ...) "
                             "instead of AWS (else AWS_ENDPOINT_URL, if set)")
    parser.add_argument("--data-shards", type=int, default=4, metavar="N",
                        help="data files per store, 1 to 255: the write parallelism of each "
                             "store")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="processes that decode and flatten the records while this one "
                             "writes them (default 1: this process alone); the stores are the "
                             "same whatever N")
    parser.add_argument("--quiet", action="store_true",
                        help="no progress on stderr (else a bar on a terminal, and plain lines "
                             "elsewhere)")
    return parser


def _add_storage_options(parser: argparse.ArgumentParser) -> None:
    """--codec, --dict and --dict-from: how each column's records are stored."""
    parser.add_argument("--codec", action="append", type=_codec, metavar="[COLUMN=]CODEC",
                        help=f"how records are stored: {', '.join(zrecord.CODECS)} "
                             "(zstd_dict: zstd frames made with a dictionary: --dict or "
                             "--dict-from). CODEC alone is the "
                             "default of every column, COLUMN=CODEC one column's; repeat it "
                             "for several (e.g. --codec zstd --codec label=raw). A column that "
                             "gets its codec only as the default and holds small records "
                             "(labels, ids) or encoded files is stored raw unless the codec "
                             "makes a sample of it smaller (encoded files: by 5%%) "
                             "(default: zstd)")
    parser.add_argument("--dict", dest="dict_bytes", action="append", type=_read_dict,
                        metavar="[COLUMN=]FILE",
                        help="a zstd dictionary file for the zstd_dict columns (e.g. saved "
                             "from zrecord.train_dict), or COLUMN=FILE for one column's")
    parser.add_argument("--dict-from", action="append", type=_columns, metavar="COLUMN",
                        help="train a zstd dictionary from this column's own records and store "
                             "the column with it (codec zstd_dict); comma-separated or "
                             "repeated for several")


def _add_column_options(parser: argparse.ArgumentParser) -> None:
    """--columns, --images, --audio, --cast and --image-mode: which columns are converted, and
    what of their images and audio is stored."""
    parser.add_argument("--columns", metavar="A,B,...", type=_columns,
                        help="comma-separated subset of columns, spaces allowed (default: "
                             "all); every split and column name becomes a folder, so names "
                             "with '/', a NUL, a leading '.', '..' or too many bytes are "
                             "refused: leave such columns out here")
    parser.add_argument("--images", choices=["decode", "encoded"], default="decode",
                        help="decode: store each image's pixels, as datasets decodes them; "
                             "encoded: store each image file's bytes as they are (a uint8 "
                             "record), to decode while training")
    parser.add_argument("--audio", choices=["decode", "encoded"], default="decode",
                        help="decode: store each clip's samples (float32, channels x samples); "
                             "encoded: store each audio file's bytes as they are")
    parser.add_argument("--cast", action="append", type=_cast, metavar="COLUMN=MODE",
                        help="decode the Image column COLUMN to the Pillow mode MODE (e.g. "
                             "image=RGB), as Image(mode=...) does; repeat for several columns")
    parser.add_argument("--image-mode", type=_image_mode, metavar="MODE",
                        help="decode every Image column to the Pillow mode MODE (e.g. RGB)")


def _status_of(exc: BaseException) -> int:
    """The exit status for an error `_run` explains: the dataset, the source or the options
    (1), or the system (3)."""
    if isinstance(exc, HubError):
        return EXIT_RUNTIME  # the Hub, the network or the cache did not deliver
    if isinstance(exc, WorkerError):
        return EXIT_RUNTIME  # a worker process was killed (out of memory, say)
    if isinstance(exc, ConversionError):
        return EXIT_UNCONVERTIBLE  # also no such SOURCE, or ROOT exists: nothing was written
    if isinstance(exc, (MemoryError, OSError)):
        return EXIT_RUNTIME  # zrecord's OSErrors too: a write the system refused
    return EXIT_UNCONVERTIBLE  # zrecord refused a value (a record over a limit, say)


def _load(args: argparse.Namespace) -> Any:
    """The dataset SOURCE names: an existing path is local; otherwise a bare owner/name is a
    Hub id and anything else a local path that does not exist."""
    source = args.source
    if "://" in source and not os.path.exists(source):
        raise SourceError(f"SOURCE {source.partition('://')[0]}://... is a URL; loaderx-convert "
                          "reads a Hub dataset id (owner/name) or a local path (a save_to_disk "
                          "folder, parquet file(s)): download the dataset first")
    if os.path.exists(source) or not is_hub_id(source):
        try:
            return from_local(source, config=args.config)
        except SourceNotFoundError as exc:
            if not any(sep in source for sep in "/\\") and not source.startswith(("~", ".")):
                # A bare name may be meant as a Hub id; those have an owner.
                raise SourceNotFoundError(f"{exc}; a Hub dataset id is owner/name (e.g. "
                                          "ylecun/mnist)") from None
            raise
    try:
        return huggingface(source, revision=args.revision, config=args.config,
                           token=args.token, endpoint=args.endpoint, cache_dir=args.cache_dir)
    except HubError as exc:
        raise HubError(f"{exc} (SOURCE {source!r} is read as a Hub dataset id: there is no "
                       "such local path either)") from exc


def _run(argv: list[str] | None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.endpoint_url and not zrecord.is_url(args.root):
        parser.error(f"--endpoint-url is for an s3:// ROOT; ROOT {args.root!r} is a local path")
    try:
        dataset = _load(args)
        columns = args.columns or None
        if args.cast or args.image_mode:
            dataset = _apply_casts(dataset, args.cast or [], args.image_mode, columns)
        dict_from = [c for group in args.dict_from or [] for c in group] or None
        storage: zrecord.StorageOptions = ({"endpoint_url": args.endpoint_url}
                                           if args.endpoint_url else {})
        record = convert(dataset, args.root, codec=_per_column(args.codec, "zstd"),
                         columns=columns, dict_bytes=_per_column(args.dict_bytes, None),
                         dict_from=dict_from, images=args.images, audio=args.audio,
                         data_shards=args.data_shards, progress=not args.quiet,
                         storage_options=storage or None, workers=args.workers)
    except BrokenPipeError:
        raise  # a progress bar met a closed stderr: run_tool ends the command quietly
    except UnsafePathError as exc:
        say(f"loaderx-convert: error: {_unsafe_name_message(exc)}")
        return EXIT_UNCONVERTIBLE
    except (ConversionError, zrecord.ZrecordError, OSError, MemoryError) as exc:
        # Only what the message explains: the converter's refusals, zrecord's (a value over a
        # format limit), and the system's. Anything else is a bug, and its traceback is the
        # report to file.
        say(f"loaderx-convert: error: {message_of(exc)}")
        return _status_of(exc)
    # The stores' paths as they are: under ROOT without a slash of its own at its end (an
    # s3:// URL with an empty segment names another object, which does not open).
    base = args.root.rstrip("/") or args.root
    for split, info in record["splits"].items():
        for column, col in info["columns"].items():
            shape = col.get("item_shape", f"ndim={col.get('ndim')}")
            notes = [col.get("codec", "")]
            if col.get("encoding") == "encoded":
                notes.append("encoded " + ", ".join(f"{k} {v}" for k, v in col["formats"].items()))
            print(f"{base}/{split}/{column}: {col['kind']} {col['dtype']} {shape} "
                  f"x {col['records']} ({'; '.join(n for n in notes if n)})")
    if zrecord.is_url(args.root):
        stores = sum(len(info["columns"]) for info in record["splits"].values())
        print(f"{base}: published ({stores} stores, then provenance.json; each store "
              "verified and checked on its way up)")
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

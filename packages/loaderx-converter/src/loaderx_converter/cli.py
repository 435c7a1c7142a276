"""``loaderx-convert SOURCE ROOT``: convert a Hub dataset, a save_to_disk folder or parquet files."""

from __future__ import annotations

import argparse
import os
import sys

from loaderx_converter import (
    ConversionError,
    UnsafePathError,
    convert,
    from_local,
    huggingface,
)


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


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="loaderx-convert",
        description="Convert a Hugging Face dataset into one zrecord store per column under "
                    "ROOT/split/column. SOURCE is a Hub repository id, a save_to_disk folder, "
                    "or parquet file(s) / a folder of them.")
    parser.add_argument("source", help="Hub dataset id (e.g. ylecun/mnist) or a local path")
    parser.add_argument("root", help="destination folder; must not exist, nor lie inside a "
                                     "published zrecord store")
    parser.add_argument("--codec", default="zstd", choices=["raw", "zstd", "zstd_dict"])
    parser.add_argument("--dict", dest="dict_path", metavar="FILE",
                        help="zstd dictionary for --codec zstd_dict (e.g. from zrecord.train_dict)")
    parser.add_argument("--columns",
                        help="comma-separated subset of columns; every split and column name "
                             "becomes a folder, so names with '/', a NUL, a leading '.', "
                             "'..' or too many bytes are refused: leave such columns out here")
    parser.add_argument("--revision", default="main", help="branch, tag or commit (Hub only)")
    parser.add_argument("--config", help="dataset configuration name")
    parser.add_argument("--endpoint", help="Hub endpoint, e.g. https://hf-mirror.com")
    parser.add_argument("--token", help="Hub token for private or gated datasets")
    parser.add_argument("--cache-dir", help="Hugging Face cache folder")
    parser.add_argument("--data-shards", type=int, default=4)
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)

    try:
        if os.path.exists(args.source):
            dataset = from_local(args.source, config=args.config)
        else:
            dataset = huggingface(args.source, revision=args.revision, config=args.config,
                                  token=args.token, endpoint=args.endpoint, cache_dir=args.cache_dir)
        dict_bytes = None
        if args.dict_path:
            with open(args.dict_path, "rb") as f:
                dict_bytes = f.read()
        columns = [c for c in args.columns.split(",") if c] if args.columns else None
        record = convert(dataset, args.root, codec=args.codec, columns=columns,
                         dict_bytes=dict_bytes, data_shards=args.data_shards,
                         progress=not args.quiet)
    except UnsafePathError as exc:
        print(f"loaderx-convert: error: {_unsafe_name_message(exc)}", file=sys.stderr)
        return 1
    except (ConversionError, OSError, ValueError, KeyError, TypeError) as exc:
        print(f"loaderx-convert: error: {exc}", file=sys.stderr)
        return 1
    for split, info in record["splits"].items():
        for column, col in info["columns"].items():
            shape = col.get("item_shape", f"ndim={col.get('ndim')}")
            print(f"{args.root}/{split}/{column}: {col['kind']} {col['dtype']} {shape} "
                  f"x {col['records']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Runs every conformance case of v1/cases.json, v1.1/cases.json, v1.2/cases.json and
datasets/cases.json against the reference reader, in both of its modes: judging the whole index at open, and judging a store with
index parts by part (spec section 9.6).

    python conformance/run_reference.py [-v] [--mode whole|part] [case-name ...]

A valid case passes when the reader returns exactly the expected records (dtype, shape and
bytes) and its whole-store verification passes; an invalid case passes when the reader raises
the expected error code: at open for phase "open", at open or while reading every record for
phase "read", and at open or when verifying the whole store for phase "verify" (reading may
succeed then, or fail with the case's `read_error`). A case of phase "read" that names
`bad_records` (1.2) must, in a reader that opened it, fail with its code on every read of those
records and read every other record. The cases that v1.2/cases.json lists in `supersedes` are
skipped: a reader of 1.2 runs their replacements instead. Exit status 1 if any case fails.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
FOLDERS = [HERE / "v1", HERE / "v1.1", HERE / "v1.2"]
MODES = {"whole": False, "part": True}
sys.path.insert(0, str(HERE))

from reference.dataset import open_dataset  # noqa: E402
from reference.reader import FormatViolation, open_store  # noqa: E402

DATASETS = HERE / "datasets"


def load_cases() -> list[tuple[Path, dict[str, Any]]]:
    """Every case of the folders, less those a later folder supersedes."""
    out = []
    superseded: set[str] = set()
    for folder in FOLDERS:
        with open(folder / "cases.json", encoding="utf-8") as f:
            manifest = json.load(f)
        out += [(folder, case) for case in manifest["cases"]]
        superseded |= {s["case"] for s in manifest.get("supersedes", [])}
    return [(f, c) for f, c in out if f"{f.name}/{c['name']}" not in superseded]


def run_case(folder: Path, case: dict[str, Any], by_part: bool = False) -> str | None:
    """Returns None if the case passes, else what went wrong."""
    path = folder / case["store"]
    if case["expect"] == "valid":
        try:
            store = open_store(path, by_part=by_part)
            got = store.read_all()
            store.verify()
        except FormatViolation as exc:
            return f"valid store rejected: {exc}"
        if "dtype_descr" in case and store.dtype != np.dtype(case["dtype_descr"]):
            return f"dtype {store.dtype.str}, expected {case['dtype_descr']}"
        want = [np.load(folder / p, allow_pickle=False) for p in case["records"]]
        if len(got) != len(want):
            return f"{len(got)} records, expected {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            if g.dtype != w.dtype or g.shape != w.shape or g.tobytes() != w.tobytes():
                return f"record {i}: got {g.dtype}{g.shape}, expected {w.dtype}{w.shape} or bytes differ"
        return None
    try:
        store = open_store(path, by_part=by_part)
    except FormatViolation as exc:
        return None if exc.code == case["error"] else f"error {exc.code} ({exc}), expected {case['error']}"
    if case["phase"] == "open":
        return f"open succeeded, expected error {case['error']} at open"
    if case["phase"] == "verify":
        return _run_verify(store, path, case, by_part)
    if "bad_records" in case:
        return _run_bad_records(store, case)
    try:
        store.read_all()
    except FormatViolation as exc:
        return None if exc.code == case["error"] else f"error {exc.code} ({exc}), expected {case['error']}"
    return f"every record read, expected error {case['error']}"


def run_dataset_case(case: dict[str, Any], by_part: bool = False) -> str | None:
    """A case of conformance/datasets/ (spec section 12): a valid dataset reads its records
    and digest; an invalid one is rejected at open with its code."""
    path = DATASETS / case["dataset"]
    try:
        ds = open_dataset(path, case["version"], by_part=by_part)
        got = ds.read_all()
        ds.verify()
    except FormatViolation as exc:
        if case["expect"] == "valid":
            return f"valid dataset rejected: {exc}"
        return None if exc.code == case["error"] else f"error {exc.code} ({exc}), expected {case['error']}"
    if case["expect"] == "error":
        return f"opened, expected error {case['error']} at open"
    if ds.digest != case["digest"] or ds.manifest.version != case["opened_version"]:
        return f"digest {ds.digest} v{ds.manifest.version}, expected {case['digest']} v{case['opened_version']}"
    want = [np.load(DATASETS / p, allow_pickle=False) for p in case["records"]]
    if len(got) != len(want) or any(g.dtype != w.dtype or g.shape != w.shape or g.tobytes() != w.tobytes()
                                    for g, w in zip(got, want)):
        return "records differ"
    return None


def _run_bad_records(store: Any, case: dict[str, Any]) -> str | None:
    """Phase "read" with `bad_records`: each record of the range fails with `error`, every
    other record reads (in record order, twice over, so that a part judged once and remembered,
    or remembered as bad, answers the same), and a verification reports `error`."""
    first, last = case["bad_records"]
    for _ in range(2):
        for i in range(store.record_count):
            try:
                store.read(i)
            except FormatViolation as exc:
                if not first <= i <= last:
                    return f"record {i}, outside bad_records, failed: {exc}"
                if exc.code != case["error"]:
                    return f"record {i}: error {exc.code} ({exc}), expected {case['error']}"
            else:
                if first <= i <= last:
                    return f"record {i} read, expected error {case['error']}"
    try:
        store.verify()
    except FormatViolation as exc:
        return None if exc.code == case["error"] else f"verify: error {exc.code} ({exc}), expected {case['error']}"
    return f"verified, expected error {case['error']}"


def _run_verify(store: Any, path: Path, case: dict[str, Any], by_part: bool = False) -> str | None:
    """Phase "verify": reading the records succeeds, or fails with `error` or, where the case
    gives one, `read_error` (a record's own rule, which it must then break); a whole-store
    verification of a freshly opened store reports `error` (spec section 9.4)."""
    read_error = case.get("read_error")
    try:
        store.read_all()
        if read_error is not None:
            return f"every record read, expected error {read_error} from a record"
    except FormatViolation as exc:
        if exc.code not in (case["error"], read_error):
            return f"reading: error {exc.code} ({exc}), expected {read_error or case['error']}"
    try:
        open_store(path, by_part=by_part).verify()
    except FormatViolation as exc:
        return None if exc.code == case["error"] else f"verify: error {exc.code} ({exc}), expected {case['error']}"
    return f"verified, expected error {case['error']}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--mode", choices=sorted(MODES), action="append",
                        help="judge the index whole at open, or by part (default: both)")
    parser.add_argument("names", nargs="*")
    args = parser.parse_args()
    cases = [(f, c) for f, c in load_cases() if not args.names or c["name"] in args.names]
    failed_any = False
    for mode in args.mode or list(MODES):
        failed = 0
        for folder, case in cases:
            problem = run_case(folder, case, MODES[mode])
            if problem is not None:
                failed += 1
                print(f"FAIL ({mode}) {folder.name}/{case['name']}: {problem}")
            elif args.verbose:
                print(f"ok   ({mode}) {folder.name}/{case['name']}")
        print(f"reference reader, index judged {mode}: {len(cases) - failed} of {len(cases)} cases pass")
        failed_any = failed_any or failed > 0
        with open(DATASETS / "cases.json", encoding="utf-8") as f:
            datasets = [c for c in json.load(f)["cases"] if not args.names or c["name"] in args.names]
        failed = 0
        for case in datasets:
            problem = run_dataset_case(case, MODES[mode])
            if problem is not None:
                failed += 1
                print(f"FAIL ({mode}) datasets/{case['name']}: {problem}")
            elif args.verbose:
                print(f"ok   ({mode}) datasets/{case['name']}")
        print(f"reference reader, datasets, index judged {mode}: {len(datasets) - failed} of "
              f"{len(datasets)} cases pass")
        failed_any = failed_any or failed > 0
    return 1 if failed_any else 0


if __name__ == "__main__":
    sys.exit(main())

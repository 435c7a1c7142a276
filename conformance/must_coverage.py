"""Lists every MUST requirement of spec/ that no conformance case and no test cites.

    python conformance/must_coverage.py [-v]

A requirement is a bullet that starts with an ID such as `[ZR-HDR-004]` or `[ZR-DS-002]` (or a
range, `[ZR-DS-003] to [ZR-DS-005]`, which states each ID of it) and whose text says MUST (or
MUST NOT). It is covered when its ID appears in the `spec` list of a case of v1/cases.json,
v1.1/cases.json, v1.2/cases.json or datasets/cases.json, or in a test: a file under packages/*/tests/, a conformance/test_*.py, a
zig/src/tests*.zig or zig/src/*_test.zig file, or the inline `test` blocks at the end of any
other zig/src/*.zig file (from its first `test "` line on). Exit status 1 if any is uncovered.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ID = re.compile(r"ZR-[A-Z]{2,3}-\d{3}")
BULLET = re.compile(r"^- \[(ZR-[A-Z]{2,3}-\d{3})\](?: to \[(ZR-[A-Z]{2,3}-\d{3})\])?")
CASE_FOLDERS = ("v1", "v1.1", "v1.2", "datasets")


def must_ids() -> dict[str, str]:
    """ID -> requirement text, for every bullet requirement of spec/*.md that says MUST."""
    found: dict[str, str] = {}
    for spec in sorted((ROOT / "spec").glob("*.md")):
        current: list[str] = []
        text: list[str] = []
        for line in spec.read_text(encoding="utf-8").splitlines() + [""]:
            m = BULLET.match(line)
            if m or not line.startswith("  ") or not line.strip():
                if current and "MUST" in " ".join(text):
                    for rid in current:
                        found[rid] = " ".join(text)
                current, text = (_span(m.group(1), m.group(2)), [line]) if m else ([], [])
            elif current:
                text.append(line.strip())
    return found


def _span(first: str, last: str | None) -> list[str]:
    """The IDs a bullet states: one, or each of a range of one prefix."""
    if last is None:
        return [first]
    prefix, a = first.rsplit("-", 1)
    if not last.startswith(prefix + "-"):
        raise SystemExit(f"must_coverage: a range across prefixes: [{first}] to [{last}]")
    return [f"{prefix}-{k:03d}" for k in range(int(a), int(last.rsplit("-", 1)[1]) + 1)]


def test_files() -> list[tuple[Path, str]]:
    files: list[Path] = []
    files += sorted(ROOT.glob("packages/*/tests/**/*.py"))
    files += sorted(HERE.glob("test_*.py"))
    files += sorted(ROOT.glob("zig/src/tests*.zig")) + sorted(ROOT.glob("zig/src/*_test.zig"))
    files += sorted(ROOT.glob("zig/tests/**/*.zig"))
    out = [(p, p.read_text(encoding="utf-8")) for p in dict.fromkeys(files)]
    for p in sorted(ROOT.glob("zig/src/*.zig")):
        if p in files:
            continue
        text = p.read_text(encoding="utf-8")
        start = text.find('\ntest "')
        if start >= 0:
            out.append((p, text[start:]))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="show where each is cited")
    args = parser.parse_args()
    musts = must_ids()
    cited: dict[str, list[str]] = {}
    for folder in CASE_FOLDERS:
        manifest = json.loads((HERE / folder / "cases.json").read_text(encoding="utf-8"))
        for case in manifest["cases"]:
            for rid in case["spec"]:
                cited.setdefault(rid, []).append(f"case {folder}/{case['name']}")
    for path, text in test_files():
        for rid in set(ID.findall(text)):
            cited.setdefault(rid, []).append(str(path.relative_to(ROOT)))
    missing = sorted(set(musts) - set(cited))
    unknown = sorted(rid for rid in cited if rid not in musts and not _defined(rid))
    if args.verbose:
        for rid in sorted(musts):
            where = cited.get(rid, [])
            print(
                f"{rid}: {len(where)} citations ({', '.join(where[:3])}{', ...' if len(where) > 3 else ''})"
            )
    for rid in missing:
        print(f"uncovered: {rid}: {musts[rid][:150]}")
    for rid in unknown:
        print(f"cited but not defined in spec/: {rid} ({', '.join(cited[rid][:3])})")
    print(
        f"must_coverage: {len(musts)} MUST requirements, {len(missing)} uncovered, "
        f"{len(unknown)} unknown IDs cited"
    )
    return 1 if missing or unknown else 0


def _defined(rid: str) -> bool:
    return any(f"[{rid}]" in p.read_text(encoding="utf-8") for p in (ROOT / "spec").glob("*.md"))


if __name__ == "__main__":
    sys.exit(main())

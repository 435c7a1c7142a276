"""packages/build_support.py and tools/release.py under builds that run at once: the suite
starts its `wheels` and `windows` sessions side by side in a fresh clone, and both fetch,
unpack and compile zstd into the same build/ folders (one CI run failed both sessions so).

The compiler and pip are stood in for by functions that take their time (forked processes
inherit them), so the tests run in seconds and need no network; the archive is a small one
made here, with the layout of the pinned one."""

from __future__ import annotations

import hashlib
import io
import multiprocessing
import os
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest
import release

build_support = release.build_support()


def _archive(path: Path) -> str:
    """A source archive laid out as the pinned one (zstd's lib/ under ZSTD_LIB_IN_SDIST, its
    LICENSE beside lib/); returns its sha256."""
    top = f"backports_zstd-x/{build_support.ZSTD_LIB_IN_SDIST.rpartition('/')[0]}"
    major, minor, patch = build_support.ZSTD_VERSION.split(".")
    files = {"LICENSE": b"license\n",
             "lib/zstd.h": (f"#define ZSTD_VERSION_MAJOR {major}\n#define ZSTD_VERSION_MINOR "
                            f"{minor}\n#define ZSTD_VERSION_RELEASE {patch}\n").encode()}
    for part in build_support.ZSTD_LIB_PARTS:
        for n in range(20):
            files[f"lib/{part}/f{n}.c"] = b"int x;\n" * 64
    files["lib/decompress/huf_decompress_amd64.S"] = b"\n"
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _slow_compiler(log: Path) -> Any:
    """A stand-in for `zig build-lib`: checks that every source it is given exists before and
    after a pause (a compile reads them all along), records the target, writes its output."""
    def run(cmd: list[str], **_: Any) -> None:
        sources = [a for a in cmd if a.endswith((".c", ".S"))]
        missing = [s for s in sources if not os.path.isfile(s)]
        time.sleep(0.4)
        missing += [s for s in sources if not os.path.isfile(s)]
        with open(log, "a") as f:
            f.write(f"{cmd[cmd.index('-target') + 1]} {len(missing)}\n")
        (out,) = [a.split("=", 1)[1] for a in cmd if a.startswith("-femit-bin=")]
        Path(out).write_bytes(b"lib")
    return run


def _build(build: Path, system: str, start: Any, results: Any) -> None:
    start.wait()
    try:
        out = build_support.build_static_zstd(build, "x86_64", {}, lambda _: None, system)
        results.put((system, str(out), out.read_bytes()))
    except Exception as exc:  # noqa: BLE001 (reported to the test, whatever it was)
        results.put((system, "failed", repr(exc).encode()))


def test_builds_at_once_unpack_once_and_compile_each_target_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive, log, build = tmp_path / "sources.tar.gz", tmp_path / "compiles", tmp_path / "build"
    monkeypatch.setattr(build_support, "ZSTD_SDIST_SHA256", _archive(archive))
    monkeypatch.setenv("ZRECORD_ZSTD_SDIST", str(archive))
    monkeypatch.setattr(build_support.subprocess, "run", _slow_compiler(log))
    fork = multiprocessing.get_context("fork")
    start, results = fork.Barrier(4), fork.Queue()
    workers = [fork.Process(target=_build, args=(build, system, start, results))
               for system in ("linux", "linux", "windows", "windows")]
    for worker in workers:
        worker.start()
    got = sorted(results.get(timeout=60) for _ in workers)
    for worker in workers:
        worker.join(timeout=60)
    assert [g[1] for g in got if g[1] == "failed"] == [], got
    assert {(system, data) for system, _, data in got} == {("linux", b"lib"), ("windows", b"lib")}
    # One compile per target, each of which found all of its sources there the whole time:
    # unlocked, the four compiled, and a build that unpacked second removed the first's files.
    compiles = sorted(log.read_text().splitlines())
    assert compiles == ["x86_64-linux-gnu.2.28 0", "x86_64-windows-gnu 0"], compiles


def _fetch(start: Any, results: Any) -> None:
    start.wait()
    try:
        env = release.release_env("x86_64")
        results.put(Path(env["ZRECORD_ZSTD_SDIST"]).read_bytes())
    except Exception as exc:  # noqa: BLE001 (reported to the test, whatever it was)
        results.put(repr(exc).encode())


def test_a_build_never_finds_the_sources_half_fetched(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    whole = b"z" * (1 << 20)

    def slow_pip(*command: str, **_: Any) -> str:
        # pip copies the archive into --dest: here in two halves, a pause between them.
        dest = Path(command[command.index("--dest") + 1])
        dest.mkdir(parents=True, exist_ok=True)  # as pip does
        with open(dest / build_support.ZSTD_SDIST_FILE, "wb") as f:
            f.write(whole[: len(whole) // 2])
            f.flush()
            time.sleep(0.5)
            f.write(whole[len(whole) // 2:])
        return ""

    monkeypatch.setattr(release, "ROOT", tmp_path)
    monkeypatch.setattr(release, "run", slow_pip)
    fork = multiprocessing.get_context("fork")
    start, results = fork.Barrier(1), fork.Queue()
    first = fork.Process(target=_fetch, args=(start, results))
    first.start()
    time.sleep(0.25)  # the first is halfway through its copy
    second = fork.Process(target=_fetch, args=(start, results))
    second.start()
    got = [results.get(timeout=30) for _ in range(2)]
    first.join(timeout=30)
    second.join(timeout=30)
    assert [len(g) for g in got] == [len(whole)] * 2
    assert list((tmp_path / "build" / "zstd-sdist").iterdir()) == [
        tmp_path / "build" / "zstd-sdist" / build_support.ZSTD_SDIST_FILE]

"""zrecord's and loaderx's tests on aarch64 release wheels under qemu-user: the `arm64` nox session.

A Debian arm64 root with its python3, entered with chroot while qemu-user runs its binaries
([W1]). Needs root on Debian (apt-get, binfmt_misc, chroot, unshare). Two steps, which the
session runs in this order, with the wheels built in between:

    python tools/arm64.py root                          # qemu-user and the root, made once
    python tools/arm64.py test WHEEL... [-- PYTEST-ARGS]

`test` copies the aarch64 wheels into the root's wheelhouse, fetches aarch64 wheels of their
third-party requirements (and of their `test` extras) with pip here, installs everything in a
virtual environment inside the root and runs both test suites there; PYTEST-ARGS replace the
default selection (`-m "not heavy and not slow and not remote"`: the chroot has no
moto_server). Both suites run whatever the first one's outcome; the exit status is non-zero if either failed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from apt_lock import apt_lock
from release import ROOT, requires_dist, run

# Built once (~10 minutes) into build/ and reused.
ARM64_ROOT = ROOT / "build" / "arm64-root"
ARM64_PACKAGES = "python3,python3-venv"
# qemu's own registration for 64-bit little-endian aarch64 ELF files, with flag F (the kernel
# opens the emulator once, so it also runs binaries inside a chroot).
QEMU_AARCH64_BINFMT = (
    r":qemu-aarch64:M::\x7f\x45\x4c\x46\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00"
    r"\x02\x00\xb7\x00:\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff"
    r"\xfe\xff\xff\xff:/usr/bin/qemu-aarch64-static:F"
)
# Tests left out under emulation. test_torch.py and three of the seed's examples need PyTorch or
# JAX, and the converter import test needs loaderx-converter with `datasets` and Arrow: all are
# pure Python above the stores and run natively in `loaderx` and `converter`. qemu-user does not apply RLIMIT_AS to the
# emulated process, so the tests that expect an allocation past a 1 GiB address-space limit
# to fail see it succeed; and the fuzz harness's hang self-test gets through 2 executions in
# its 5 seconds under emulation, before the planted hang. (--deselect takes node IDs, which are
# relative to each suite's pytest root: packages/zrecord for zrecord's, the repository for
# loaderx's.)
ARM64_LEFT_OUT = [
    "--ignore", "packages/loaderx/tests/test_torch.py",
    "--deselect", "packages/loaderx/tests/test_seed_examples.py::test_cpu_to_gpu_transfer_with_torch",
    "--deselect", "packages/loaderx/tests/test_seed_examples.py::test_cpu_to_gpu_transfer_with_pinned_memory",
    "--deselect", "packages/loaderx/tests/test_seed_examples.py::test_jax_device_put",
    "--deselect", "packages/loaderx/tests/test_import_paths.py::test_converter_import_with_the_distribution",
    "--deselect", "tests/test_cli.py::test_head_of_huge_records_runs_in_bounded_memory",
    "--deselect", "tests/test_hostile.py::"
                  "test_fuzz_harness_catches_crashes_hangs_and_overallocation[memory-overallocation]",
    "--deselect", "tests/test_hostile.py::"
                  "test_fuzz_harness_catches_crashes_hangs_and_overallocation[hang-hang input]",
]


def debian_source() -> tuple[str, str]:
    """The Debian suite of this machine and the package registry its apt reads it from."""
    release = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines()
                   if "=" in line)
    suite = release.get("VERSION_CODENAME", "").strip('"')
    for sources in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for block in sources.read_text().split("\n\n"):
            fields = dict(line.split(":", 1) for line in block.splitlines()
                          if ":" in line and not line.startswith("#"))
            if suite in fields.get("Suites", "").split():
                return suite, fields["URIs"].split()[0]
    for line in Path("/etc/apt/sources.list").read_text().splitlines() if Path(
            "/etc/apt/sources.list").is_file() else []:
        words = [w for w in line.split() if not w.startswith("[")]
        if len(words) >= 3 and words[0] == "deb" and words[2] == suite:
            return suite, words[1]
    raise SystemExit(f"no apt source for Debian {suite!r} on this machine")


def make_root() -> None:
    """qemu-user for aarch64 binaries and the Debian arm64 root, made once."""
    if not (shutil.which("qemu-aarch64-static") and shutil.which("debootstrap")):
        with apt_lock():
            run("apt-get", "update", "-q")
            run("apt-get", "install", "-y", "-q", "qemu-user-static", "debootstrap")
    misc = Path("/proc/sys/fs/binfmt_misc")
    if not (misc / "register").exists():
        run("mount", "-t", "binfmt_misc", "binfmt_misc", str(misc))
    if not (misc / "qemu-aarch64").exists():
        (misc / "register").write_text(QEMU_AARCH64_BINFMT)
    suite, mirror = debian_source()
    # The stamp keeps the name it had when the noxfile made the root, so such roots are reused.
    stamp = ARM64_ROOT / ".made-by-noxfile"
    wanted = f"{suite} {ARM64_PACKAGES}\n"
    if not (stamp.is_file() and stamp.read_text() == wanted):
        mounted = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
        if any(m.startswith(str(ARM64_ROOT)) for m in mounted):
            raise SystemExit(f"something is mounted below {ARM64_ROOT}; unmount it first")
        shutil.rmtree(ARM64_ROOT, ignore_errors=True)
        run("debootstrap", "--arch=arm64", "--variant=minbase", f"--include={ARM64_PACKAGES}",
            suite, str(ARM64_ROOT), mirror)
        stamp.write_text(wanted)
    # An emulator registered without F (by binfmt-support, say) is looked up inside the root.
    interpreter = (misc / "qemu-aarch64").read_text().split("interpreter ", 1)[1].split()[0]
    for path in {interpreter, "/usr/bin/qemu-aarch64-static"}:
        inside = ARM64_ROOT / path.lstrip("/")
        inside.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.realpath(path), inside)


def in_root(command: str, capture: bool = False) -> str:
    """Run a shell command inside the arm64 root, with /proc, /dev, /sys and this repository
    (at its own path) mounted in a private mount namespace that ends with the command."""
    mounts = " && ".join(
        [f"mount --rbind /{d} {ARM64_ROOT}/{d}" for d in ("proc", "dev", "sys")]
        + [f"mkdir -p {ARM64_ROOT}{ROOT}", f"mount --bind {ROOT} {ARM64_ROOT}{ROOT}"])
    inner = command.replace("'", "'\\''")
    # Nothing of this machine's environment (nox's PATH and VIRTUAL_ENV, pip's settings)
    # reaches the root.
    clean = "env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root LANG=C.UTF-8"
    return run("unshare", "--mount", "--fork", "sh", "-c",
               f"{mounts} && exec chroot {ARM64_ROOT} {clean} sh -c '{inner}'", capture=capture)


def test(wheels: list[Path], select: list[str]) -> None:
    """Install `wheels` and their requirements in the root and run both suites there."""
    house = ARM64_ROOT / "wheelhouse"
    shutil.rmtree(house, ignore_errors=True)
    house.mkdir()
    for wheel in wheels:
        shutil.copy2(wheel, house)
    version = in_root("python3 -c \"import sys; print('%d.%d' % sys.version_info[:2])\"", capture=True)
    python = version.strip().splitlines()[-1]
    deps = sorted({req for wheel in house.glob("*.whl") for extra in (None, "test")
                   for req in requires_dist(wheel, extra)})
    run(sys.executable, "-m", "pip", "download", "-q", "--only-binary", ":all:", "--dest", str(house),
        "--python-version", python, "--implementation", "cp",
        *(f"--platform={p}" for p in ("manylinux_2_28_aarch64", "manylinux_2_17_aarch64",
                                       "manylinux2014_aarch64")), *deps)
    in_root("python3 -m venv --clear /opt/venv && /opt/venv/bin/python -m pip install "
            "-q --no-index --find-links /wheelhouse 'zrecord[test]' 'loaderx[test]'")
    select = select or ["-m", "not heavy and not slow and not remote"]
    runs = [" ".join(f"'{a}'" for a in ["/opt/venv/bin/python", "-m", "pytest", "-q", "-p",
                                          "no:cacheprovider", *select, suite, *ARM64_LEFT_OUT])
            for suite in ("packages/zrecord/tests", "packages/loaderx/tests")]
    in_root(f"cd {ROOT} && /opt/venv/bin/python -c 'import platform, zrecord; "
            f"print(platform.machine(), zrecord.__zstd_version__)' && "
            f"{{ {runs[0]}; a=$?; {runs[1]}; b=$?; [ $a = 0 ] && [ $b = 0 ]; }}")


def main(argv: list[str]) -> int:
    own, pytest_args = argv, []
    if "--" in argv:
        at = argv.index("--")
        own, pytest_args = argv[:at], argv[at + 1:]
    if own == ["root"]:
        make_root()
    elif len(own) > 1 and own[0] == "test":
        test([Path(w) for w in own[1:]], pytest_args)
    else:
        raise SystemExit(f"usage: arm64.py root | arm64.py test WHEEL... [-- PYTEST-ARGS]; given: {argv}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except subprocess.CalledProcessError as exc:
        sys.exit(f"arm64: {' '.join(map(str, exc.cmd))} exited with {exc.returncode}")

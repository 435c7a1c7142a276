"""The `loaderx-convert` command line. It behaves like a Unix tool ([U1]): --version, distinct
and documented exit statuses, one line for Ctrl-C, quiet on a closed pipe, plain-text help. It
can do what the API does ([V1] item 4): per-column codecs, encoded images, casts, trained
dictionaries, with errors that name its flags, not Python keywords. Every test runs the real
console script, on save_to_disk folders of real ``datasets`` objects."""

from __future__ import annotations

import argparse
import importlib.metadata
import io
import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import datasets
import numpy as np
import PIL.Image
import pytest
from datasets import ClassLabel, Dataset, Features, List, Sequence, Value

import zrecord
from loaderx_converter import __version__

CONVERT_SCRIPT = Path(sys.executable).parent / "loaderx-convert"


def _cli(*argv: str, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CONVERT_SCRIPT), *argv], capture_output=True, text=True,
                          timeout=300, **kwargs)


def _quiet_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return _cli(*argv, "--quiet")


def _temporaries(folder: Path) -> list[str]:
    return [name for name in os.listdir(folder) if ".zr-tmp-" in name]


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    """A save_to_disk folder of a few rows (a source that makes datasets print nothing)."""
    path = tmp_path_factory.mktemp("small") / "saved"
    Dataset.from_dict({"x": np.arange(5, dtype=np.int64)}).save_to_disk(str(path))
    return path


@pytest.fixture(scope="module")
def large(tmp_path_factory) -> Path:
    """A save_to_disk folder that takes seconds to convert."""
    path = tmp_path_factory.mktemp("large") / "saved"
    n = 400_000
    Dataset.from_dict({"x": np.arange(n, dtype=np.int64),
                       "v": [[i % 7] * (i % 11) for i in range(n)]},
                      features=Features({"x": Value("int64"), "v": Sequence(Value("int32"))})
                      ).save_to_disk(str(path))
    return path


def test_version_names_this_zrecord_and_datasets_versions():
    """[U1] item 1: --version names this package's version and the zrecord and datasets
    versions it runs with, and exits 0."""
    proc = _cli("--version")
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout == (f"loaderx-convert (loaderx-converter) {__version__}, zrecord "
                           f"{zrecord.__version__}, datasets {importlib.metadata.version('datasets')}\n")
    module = subprocess.run([sys.executable, "-m", "loaderx_converter.cli", "--version"],
                            capture_output=True, text=True, timeout=120)
    assert (module.returncode, module.stdout) == (0, proc.stdout)


def _foreground() -> None:
    """Run in a child before exec: SIGINT as a terminal's foreground job has it. A job started
    in the background by a shell without job control (CI runners, `cmd &` in a script) inherits
    SIGINT ignored, and a program started so rightly keeps ignoring it (nohup relies on that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_prints_one_line_and_publishes_nothing(large, tmp_path):
    """[U1] item 2: Ctrl-C while stores are written prints one line, no traceback, removes the
    temporary folder, and ends the process by SIGINT (a shell's status 130)."""
    root = tmp_path / "out"
    proc = subprocess.Popen([str(CONVERT_SCRIPT), str(large), str(root), "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_foreground)
    deadline = time.monotonic() + 120
    while not _temporaries(tmp_path) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    assert _temporaries(tmp_path), "the conversion never started writing"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert (proc.returncode, out, err) == (-signal.SIGINT, "", "loaderx-convert: interrupted\n")
    assert not root.exists() and _temporaries(tmp_path) == []


@pytest.mark.parametrize("workers", ["1", "2"])
def test_sigterm_cleans_up_as_ctrl_c_does(large, tmp_path, workers):
    """SIGTERM (kill, timeout, Slurm, docker stop) while stores are written: the temporary
    folder is removed, one line says so, and the process ends by SIGTERM. Was: the default
    disposition, as SIGKILL: `.ROOT.zr-tmp-*` and its lock left behind, no message."""
    root = tmp_path / "out"
    proc = subprocess.Popen([str(CONVERT_SCRIPT), str(large), str(root), "--quiet",
                             "--workers", workers],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not _temporaries(tmp_path) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    assert _temporaries(tmp_path), "the conversion never started writing"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert (proc.returncode, out, err) == (-signal.SIGTERM, "", "loaderx-convert: terminated\n")
    assert not root.exists() and _temporaries(tmp_path) == []


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="children found by /proc (Linux)")
@pytest.mark.parametrize("workers", ["2"])
def test_ctrl_c_while_the_workers_start_prints_one_line(large, tmp_path, workers):
    """The terminal sends Ctrl-C to its foreground process group. Was: a worker in it, still
    starting (its interpreter's site module, or its imports), printed its own
    KeyboardInterrupt traceback; the workers now have a session of their own."""
    root = tmp_path / "out"
    proc = subprocess.Popen([str(CONVERT_SCRIPT), str(large), str(root), "--quiet",
                             "--workers", workers],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_foreground, start_new_session=True)
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline and not children.read_text().split():
        time.sleep(0.001)
    assert children.read_text().split(), "no worker was started"
    # The workers are starting (their interpreter, then about 1.2 s of imports).
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal does: every process of the group
    out, err = proc.communicate(timeout=120)
    assert "Traceback" not in err and err.endswith("loaderx-convert: interrupted\n"), err
    assert not root.exists() and _temporaries(tmp_path) == []


def test_in_process_interrupt_returns_130(monkeypatch, capsys, small, tmp_path):
    """[U1] item 2: as a function, main([...]) returns 130 and leaves signal handlers alone."""
    import loaderx_converter.cli as cli

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "convert", interrupted)
    before = signal.getsignal(signal.SIGINT)
    assert cli.main([str(small), str(tmp_path / "out"), "--quiet"]) == 130
    assert capsys.readouterr().err == "loaderx-convert: interrupted\n"
    assert signal.getsignal(signal.SIGINT) is before


def test_a_closed_pipe_ends_quietly(small, tmp_path):
    """[U1] item 2: output into a pipe whose reader is gone ends quietly (141, as cat's
    SIGPIPE; argparse's --help and --version ignore the failed write: 0), never with
    "Exception ignored ... BrokenPipeError" from the interpreter's final flush. The
    conversion itself was published before its summary was printed."""
    for argv in ([str(small), str(tmp_path / "out"), "--quiet"], ["--help"], ["--version"]):
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            proc = subprocess.run([str(CONVERT_SCRIPT), *argv], stdout=write_end,
                                  stderr=subprocess.PIPE, text=True, timeout=300)
        finally:
            os.close(write_end)
        assert proc.returncode in ((141,) if len(argv) == 3 else (0, 141)), argv
        assert proc.stderr == "", argv
    assert zrecord.Dense.open(tmp_path / "out" / "train" / "x")[:].tolist() == [0, 1, 2, 3, 4]


def _one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    # (datasets' own "Generating train split" progress lines may precede it.)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("loaderx-convert")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_exit_statuses_tell_unconvertible_usage_and_system_failures_apart(small, tmp_path):
    """[U1] item 3: 0 published; 1 the dataset cannot be converted as asked; 2 usage; 3 the
    system failed (the Hub unreachable, a write refused). Runtime failures exited 1, like a
    dataset that cannot be converted."""
    assert _cli(str(small), str(tmp_path / "ok"), "--quiet").returncode == 0
    # 1: a string column; ROOT exists; a --data-shards value zrecord refuses.
    strings = tmp_path / "strings"
    Dataset.from_dict({"s": ["a", "b"]}).save_to_disk(str(strings))
    for argv, says in (([str(strings), str(tmp_path / "s")], "'s'"),
                       ([str(small), str(tmp_path / "ok")], "must not exist"),
                       ([str(small), str(tmp_path / "d"), "--data-shards", "0"], "--data-shards")):
        proc = _cli(*argv, "--quiet")
        assert proc.returncode == 1, (argv, proc.stderr)
        assert _one_error_line(proc).startswith("loaderx-convert: error:") and says in proc.stderr
        # Was: "loaderx-convert: error: [Errno 17] convert: the destination ...": Python's
        # errno prefix, which means nothing to a reader of the line.
        assert "[Errno" not in proc.stderr, proc.stderr
    # 2: argparse's usage errors, an unreadable --dict file among them.
    for argv in ([], [str(small)], [str(small), str(tmp_path / "u"), "--codec", "lz4"],
                 [str(small), str(tmp_path / "u"), "--dict", str(tmp_path / "missing")],
                 [str(small), str(tmp_path / "u"), "--data-shards", "many"]):
        proc = _cli(*argv)
        assert proc.returncode == 2 and proc.stderr.startswith("usage: loaderx-convert"), argv
    assert "--dict: cannot read" in _cli(str(small), "u", "--dict", str(tmp_path / "missing")).stderr
    # 3: the Hub cannot provide the dataset (offline, nothing cached) ...
    offline = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = _cli("nobody/nothing", str(tmp_path / "h"), "--cache-dir", str(tmp_path / "cache"),
                "--quiet", env=offline)
    assert proc.returncode == 3 and "HF_HUB_OFFLINE" in _one_error_line(proc)

    # ... and the system refuses a write (files may not grow beyond 1 KiB).
    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of the signal

    wide = tmp_path / "wide"
    Dataset.from_dict({"x": np.arange(10_000, dtype=np.int64)}).save_to_disk(str(wide))
    proc = _cli(str(wide), str(tmp_path / "f"), "--codec", "raw", "--quiet",
                preexec_fn=small_files)
    assert proc.returncode == 3, proc.stderr
    assert "too large" in _one_error_line(proc).lower()
    assert not (tmp_path / "f").exists()


def test_help_is_plain_text_with_defaults_statuses_and_examples():
    """[U1] item 4: --help is plain text, every argument has help, defaults are shown, and the
    epilog gives the exit statuses and examples."""
    from loaderx_converter.cli import _parser

    for action in _parser()._actions:
        assert action.help and action.help is not argparse.SUPPRESS, action.dest
    proc = _cli("--help")
    text = proc.stdout
    assert proc.returncode == 0 and proc.stderr == ""
    assert "``" not in text and not re.search(r":[a-z]+:`", text)
    words = " ".join(text.split())  # help lines wrap anywhere
    for shown in ("(default: zstd)", "(default: main)", "(default: 4)"):
        assert shown in words
    assert "exit status:" in text and "examples:" in text
    for status in ("0 ", "1 ", "2 ", "3 ", "130 "):
        assert f"\n  {status}" in text, status
    assert "\n  loaderx-convert ylecun/mnist data/mnist\n" in text


def test_progress_into_a_pipe_is_a_few_plain_lines(small, tmp_path):
    """[U2] item 7: with stderr not a terminal (a CI log, `2> log`), progress bars were tqdm's
    redraws joined by carriage returns into one very long line. Progress there is now plain
    lines, one per pass (check, write) of each split when the work is short."""
    proc = _cli(str(small), str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert "\r" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert [line.split(" done in ")[0] for line in lines] == [
        "train: check: 5/5 rows (100%)", "train: write: 5/5 rows (100%)"], proc.stderr


# ---- what the API can do, from the command line ([V1] item 4) ------------------------------


def _png(array: np.ndarray, fmt: str = "PNG") -> bytes:
    buf = io.BytesIO()
    PIL.Image.fromarray(array).save(buf, format=fmt)
    return buf.getvalue()


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> Path:
    """Grey PNGs and RGB JPEGs of one size (mixed modes), labels, a text column, and a
    compressible uint8 vector column."""
    rng = np.random.default_rng(0)
    n = 1200
    files = [_png(rng.integers(0, 255, (6, 6), dtype=np.uint8)) if i % 2 else
             _png(rng.integers(0, 255, (6, 6, 3), dtype=np.uint8), "JPEG") for i in range(n)]
    path = tmp_path_factory.mktemp("mixed") / "saved"
    Dataset.from_dict(
        {"image": [{"bytes": f, "path": None} for f in files],
         "label": rng.integers(0, 3, n).tolist(), "caption": ["a photo"] * n,
         "vec": rng.integers(0, 4, (n, 96)).astype(np.uint8).tolist()},
        features=Features({"image": datasets.Image(), "label": ClassLabel(names=["a", "b", "c"]),
                           "caption": Value("string"),
                           "vec": List(Value("uint8"), length=96)})).save_to_disk(str(path))
    return path


def test_columns_with_spaces_encoded_images_and_per_column_codecs(mixed, tmp_path):
    root = tmp_path / "out"
    proc = _quiet_cli(str(mixed), str(root), "--columns", " image , label, vec ", "--images",
                "encoded", "--codec", "zstd", "--codec", "label=raw", "--codec", "vec=raw")
    assert proc.returncode == 0, proc.stderr
    record = json.loads((root / "provenance.json").read_text())
    cols = record["splits"]["train"]["columns"]
    assert list(cols) == ["image", "image.format", "label", "vec"]
    assert cols["image"]["encoding"] == "encoded"
    assert cols["image"]["formats"] == {"JPEG": 600, "PNG": 600}
    assert cols["label"]["codec"] == "raw" and "codec_choice" not in cols["label"]
    assert record["options"]["codec"] == {"*": "zstd", "label": "raw", "vec": "raw"}
    assert f"{root}/train/image: Ragged |u1 ndim=1 x 1200" in proc.stdout


@pytest.mark.parametrize("flags", [["--cast", "image=RGB"], ["--image-mode", "RGB"]])
def test_cast_and_image_mode_decode_to_one_mode(mixed, tmp_path, flags):
    root = tmp_path / "out"
    proc = _quiet_cli(str(mixed), str(root), "--columns", "image,label", *flags)
    assert proc.returncode == 0, proc.stderr
    with zrecord.Dense.open(root / "train" / "image") as store:
        assert store.item_shape == (6, 6, 3)
        saved = datasets.load_from_disk(str(mixed))
        np.testing.assert_array_equal(store[1], np.asarray(saved[1]["image"].convert("RGB")))
    record = json.loads((root / "provenance.json").read_text())
    assert record["splits"]["train"]["columns"]["image"]["feature"]["mode"] == "RGB"
    assert record["provenance"]["source"] == "local"  # the cast kept the provenance


def test_dictionaries_from_a_column_and_from_a_file(mixed, tmp_path):
    proc = _quiet_cli(str(mixed), str(tmp_path / "a"), "--columns", "vec,label", "--dict-from", "vec")
    assert proc.returncode == 0, proc.stderr
    with zrecord.Dense.open(tmp_path / "a" / "train" / "vec") as store:
        assert store.codec == "zstd_dict" and store.dict_bytes
        (tmp_path / "vec.dict").write_bytes(store.dict_bytes)
    proc = _quiet_cli(str(mixed), str(tmp_path / "b"), "--columns", "vec", "--codec", "vec=zstd_dict",
                "--dict", f"vec={tmp_path / 'vec.dict'}")
    assert proc.returncode == 0, proc.stderr
    assert zrecord.Dense.open(tmp_path / "b" / "train" / "vec").dict_bytes == \
        (tmp_path / "vec.dict").read_bytes()


@pytest.mark.parametrize("argv, says, never", [
    ([], "Leave 'caption' out with --columns", "columns=["),
    (["--columns", "image"], "--cast image=RGB (or --image-mode RGB", "cast_column"),
    (["--columns", "vec", "--codec", "vec=zstd_dict"], "--dict vec=FILE, or have one trained "
                                                         "with --dict-from vec", "dict_bytes"),
    (["--columns", "vec", "--codec", "nope=raw"], "--codec names column(s) ['nope']", "codec="),
    (["--columns", "image", "--cast", "label=RGB"], "--cast label=RGB: column 'label' is", ""),
    (["--columns", "image, nope"], "asked for in --columns", "columns="),
])
def test_errors_name_the_flags(mixed, tmp_path, argv, says, never):
    proc = _quiet_cli(str(mixed), str(tmp_path / "out"), *argv)
    line = _one_error_line(proc)
    assert proc.returncode == 1, proc.stderr
    assert says in line, line
    assert not never or never not in line, line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv, says", [
    (["--codec", "lz4"], "argument --codec: 'lz4' is not a codec"),
    (["--codec", "=raw"], "names no column"),
    (["--cast", "image"], "argument --cast: 'image' is not COLUMN=MODE"),
    (["--image-mode", "RGBQ"], "argument --image-mode: 'RGBQ' is not a Pillow image mode"),
    (["--images", "bytes"], "argument --images: invalid choice"),
])
def test_bad_flag_values_are_usage_errors(mixed, tmp_path, argv, says):
    proc = _quiet_cli(str(mixed), str(tmp_path / "out"), *argv)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr


def test_audio_encoded_from_the_command_line(tmp_path):
    import soundfile

    clips = []
    for n in (3, 50):
        buf = io.BytesIO()
        soundfile.write(buf, np.zeros((n, 2), np.float32), 8000, format="FLAC")
        clips.append(buf.getvalue())
    saved = tmp_path / "saved"
    Dataset.from_dict({"audio": [{"bytes": c, "path": None} for c in clips]}).cast_column(
        "audio", datasets.Audio()).save_to_disk(str(saved))
    proc = _quiet_cli(str(saved), str(tmp_path / "out"), "--audio", "encoded")
    assert proc.returncode == 0, proc.stderr
    assert "encoded FLAC 2" in proc.stdout
    with zrecord.Ragged.open(tmp_path / "out" / "train" / "audio") as store:
        assert [r.tobytes() for r in store[:]] == clips

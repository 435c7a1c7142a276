"""[U3] issue 40 point 1 (the converter): ``loaderx-convert SRC s3://bucket/x`` and
``convert(ds, "s3://bucket/x")`` wrote a local folder named ``s3:`` and then printed s3://
paths as if uploaded; ``provenance.json`` was never uploaded. A URL root is now converted in a
private staging folder and published with ``zrecord.publish_folder`` (the stores, then
``provenance.json``), against the test kit's S3 server here."""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from datasets import Dataset, DatasetDict

import zrecord
import zrecord._publish as pub
from loaderx_converter import DestinationExistsError, UnsafePathError, convert

CONVERT_SCRIPT = Path(sys.executable).parent / "loaderx-convert"
KEYS = ["provenance.json", "test/label", "test/x", "train/label", "train/x"]


def _options(s3_server, **more):
    creds = s3_server.credentials
    return {"endpoint_url": s3_server.endpoint_url, "region": creds.region,
            "aws_access_key_id": creds.access_key_id,
            "aws_secret_access_key": creds.secret_access_key, **more}


def _dataset() -> DatasetDict:
    return DatasetDict({
        split: Dataset.from_dict({"x": np.arange(n, dtype=np.float32), "label": list(range(n))})
        for split, n in (("train", 6), ("test", 2))})


@pytest.fixture
def here(tmp_path, monkeypatch):
    """A working directory of the test's own, where a folder named ``s3:`` would appear."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _published(bucket, prefix) -> list[str]:
    """What lies at `prefix`: its files, and the stores (by their header.zrh)."""
    keys = bucket.keys(prefix + "/")
    return sorted({k[len(prefix) + 1:].removesuffix("/header.zrh") for k in keys
                   if k.endswith(("/header.zrh", "/provenance.json"))})


@pytest.mark.remote
def test_convert_to_a_url_publishes_every_store_and_the_provenance(s3_server, s3_bucket, here):
    url = s3_bucket.url("mnist")
    cache = here / "cache"
    record = convert(_dataset(), url, progress=False,
                     storage_options=_options(s3_server, cache_dir=str(cache)))
    assert _published(s3_bucket, "mnist") == KEYS
    assert json.loads(s3_bucket.get("mnist/provenance.json")) == record
    with zrecord.Dense.open(f"{url}/train/x", storage_options=_options(s3_server)) as ds:
        np.testing.assert_array_equal(ds[:], np.arange(6, dtype=np.float32))
    assert os.listdir(cache) == [] and sorted(os.listdir(here)) == ["cache"]  # no 's3:' folder
    # The same destination again: refused before anything is converted (its provenance.json
    # is there, as are its stores).
    with pytest.raises(DestinationExistsError, match=r"mnist/provenance.json exists"):
        convert(_dataset(), url, progress=False,
                storage_options=_options(s3_server, cache_dir=str(cache)))
    assert os.listdir(cache) == []
    # Other columns to the same prefix (no store of theirs there): refused at once too, for
    # the conversion's provenance.json. Was: refused only at the upload, after converting.
    other = DatasetDict({"train": Dataset.from_dict({"y": [1, 2, 3]})})
    with pytest.raises(DestinationExistsError, match=r"provenance.json exists"):
        convert(other, url, progress=False, storage_options=_options(s3_server, cache_dir=str(cache)))
    assert os.listdir(cache) == []


@pytest.mark.remote
@pytest.mark.parametrize("failure", [
    lambda: zrecord.ChecksumError("simulated damage"),
    # An OSError with an errno shows its strerror, not args: the note that says where the
    # copy is kept was lost from such errors (a failed request, RemoteError).
    lambda: zrecord.errors.RemoteError(errno.EIO, "s3://b/kept/train/label: the request failed"),
    # An interrupt: its note is what the command line prints after "interrupted". Was: the
    # copy kept in silence (448 MB in a temporary folder) and the same command then refused.
    KeyboardInterrupt,
], ids=["checksum", "request-failed", "ctrl-c"])
def test_a_failed_publish_keeps_the_converted_dataset_and_says_where(s3_server, s3_bucket, here,
                                                                     monkeypatch, failure):
    url = s3_bucket.url("kept")
    real = pub.publish

    def fails_for_train(source, *args, **kw):
        if "/train/" in str(source):
            raise failure()
        return real(source, *args, **kw)

    monkeypatch.setattr(pub, "publish", fails_for_train)
    with pytest.raises((zrecord.ZrecordError, KeyboardInterrupt)) as info:
        convert(_dataset(), url, progress=False,
                storage_options=_options(s3_server, cache_dir=str(here / "cache")))
    assert type(info.value) is type(failure())
    message = "; ".join([str(info.value), *getattr(info.value, "__notes__", [])])
    assert "the converted dataset is kept at" in message and "stopped at the store 'train/label'" in message
    assert "zrecord publish " in message and url in message
    kept = message.split("is kept at '")[1].split("'")[0]
    assert "mnist/provenance.json" not in s3_bucket.keys()
    monkeypatch.setattr(pub, "publish", real)
    zrecord.publish_folder(kept, url, storage_options=_options(s3_server))
    assert _published(s3_bucket, "kept") == KEYS


@pytest.mark.remote
@pytest.mark.parametrize("column", ["x#1", "what?", "a\nb"])
def test_a_column_name_that_cannot_be_part_of_a_url_is_named_before_anything_is_written(
        s3_server, s3_bucket, here, column):
    """Such names convert to a local root; for an s3:// root they are refused with the column
    and the way out (converting the others, or renaming it). Was: a traceback ending in "the
    destination URL holds '#' ... give s3://BUCKET/PREFIX", for a URL the user wrote without
    one, or "Could not parse path"."""
    ds = Dataset.from_dict({column: [1, 2, 3], "y": [4, 5, 6]})
    with pytest.raises(UnsafePathError, match=rf"column {re.escape(repr(column))}: the names cannot "
                                              r"be part of the destination's URL .*rename_column"):
        convert(ds, s3_bucket.url("odd"), progress=False,
                storage_options=_options(s3_server, cache_dir=str(here / "cache")))
    assert not [k for k in s3_bucket.keys() if k.startswith("odd/")]
    assert os.listdir(here / "cache") == []


@pytest.mark.parametrize("root", ["gs://bucket/x", "az://acct/x", "https://example.invalid/x"])
def test_a_root_that_cannot_be_written_is_refused_and_never_a_local_folder(root, here):
    with pytest.raises(UnsafePathError, match="gs://|az://|cannot write"):
        convert(_dataset(), root, progress=False)
    assert os.listdir(here) == []
    with pytest.raises(UnsafePathError, match=r"storage_options were given with the local path .*local'"):
        convert(_dataset(), here / "local", progress=False, storage_options={"region": "x"})
    assert os.listdir(here) == []


@pytest.mark.remote
def test_the_command_line_uploads_and_says_so(s3_server, s3_bucket, here):
    saved = here / "saved"
    _dataset().save_to_disk(str(saved))
    url = s3_bucket.url("cli")
    env = {**os.environ, **s3_server.env()}
    done = subprocess.run([str(CONVERT_SCRIPT), str(saved), url, "--quiet"], capture_output=True,
                          text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert f"{url}/train/x: Dense <f4 [] x 6 (raw)" in done.stdout
    assert f"{url}: published (4 stores, then provenance.json" in done.stdout
    assert _published(s3_bucket, "cli") == KEYS
    assert sorted(os.listdir(here)) == ["saved"]
    refused = subprocess.run([str(CONVERT_SCRIPT), "gs://bucket/data", str(here / "out"),
                              "--quiet"], capture_output=True, text=True, timeout=300, env=env)
    assert refused.returncode == 1 and "SOURCE gs://... is a URL" in refused.stderr

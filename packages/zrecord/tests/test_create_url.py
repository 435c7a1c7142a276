"""[U3] issue 40 point 1: ``Dense.create("s3://bucket/x")`` wrote a local folder named ``s3:``
(and ``gs://...`` a folder ``gs:``), and ``storage_options`` given with a local path were
ignored. Create by URL now stages the store locally and publishes it at ``close()`` through
``zrecord.publish``; a scheme zrecord does not read is refused wherever a store location is
taken; options with a local path are an error.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import numpy as np
import pytest

from zrecord import Dense, Ragged, open_store, publish
from zrecord.cli import main
from zrecord.errors import StoreExistsError

DATA = np.arange(4 * 6, dtype=np.int32).reshape(4, 2, 3)


def _options(s3_server, **more):
    creds = s3_server.credentials
    return {"endpoint_url": s3_server.endpoint_url, "region": creds.region,
            "aws_access_key_id": creds.access_key_id,
            "aws_secret_access_key": creds.secret_access_key, **more}


@pytest.fixture
def here(tmp_path, monkeypatch):
    """A working directory of the test's own, where a folder named ``s3:`` would appear."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _no_scheme_folders(folder) -> None:
    assert not [p for p in os.listdir(folder) if p.endswith(":")], os.listdir(folder)


@pytest.mark.remote
def test_create_by_url_publishes_at_close_and_keeps_nothing_local(s3_server, s3_bucket, here,
                                                                  monkeypatch):
    # A temporary folder of the test's own: other processes' files come and go in /tmp.
    (here / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(here / "tmp"))
    staging = here / "cache"
    url = s3_bucket.url("ds/x")
    opts = _options(s3_server, cache_dir=str(staging))
    with Dense.create(url, np.int32, (2, 3), codec="zstd", data_shards=2,
                      storage_options=opts) as w:
        w.append(DATA)
        assert w.path == url and s3_bucket.keys("ds/") == []  # nothing uploaded before close
        # The staging folder lies under cache_dir, with its lock beside it.
        assert len(os.listdir(staging)) == 2
    with Dense.open(url, storage_options=_options(s3_server)) as ds:
        np.testing.assert_array_equal(ds[:], DATA)
    assert os.listdir(staging) == []
    _no_scheme_folders(here)
    # Ragged, and without a cache_dir: staged in TMPDIR, which is left as it was.
    records = [np.arange(n, dtype=np.uint16) for n in (0, 3, 5)]
    w = Ragged.create(s3_bucket.url("ds/r"), np.uint16, 1, codec="raw",
                      storage_options=_options(s3_server))
    w.append(records)
    assert len(os.listdir(here / "tmp")) == 2
    w.close()
    assert os.listdir(here / "tmp") == []
    with Ragged.open(s3_bucket.url("ds/r"), storage_options=_options(s3_server)) as ds:
        assert [r.tolist() for r in ds] == [r.tolist() for r in records]


@pytest.mark.remote
def test_abort_or_an_exception_publishes_nothing_and_removes_the_staging(s3_server, s3_bucket,
                                                                         here):
    staging = here / "cache"
    opts = _options(s3_server, cache_dir=str(staging))
    with pytest.raises(RuntimeError, match="user code failed"):
        with Dense.create(s3_bucket.url("a"), np.int32, (2, 3), codec="raw",
                          storage_options=opts) as w:
            w.append(DATA)
            raise RuntimeError("user code failed")
    w = Dense.create(s3_bucket.url("b"), np.int32, (2, 3), codec="raw", storage_options=opts)
    w.append(DATA)
    w.abort()
    w.close()  # closed by abort: publishes nothing
    assert s3_bucket.keys() == [] and os.listdir(staging) == []


@pytest.mark.remote
def test_a_url_holding_a_store_is_refused_at_create_before_any_write(s3_server, s3_bucket, here):
    url = s3_bucket.url("taken")
    with Dense.create(url, np.int32, (2, 3), codec="raw", storage_options=_options(s3_server)) as w:
        w.append(DATA)
    staging = here / "cache"
    with pytest.raises(StoreExistsError, match="already holds a published store"):
        Dense.create(url, np.int32, (2, 3), codec="raw",
                     storage_options=_options(s3_server, cache_dir=str(staging)))
    assert not staging.exists() or os.listdir(staging) == []


@pytest.mark.remote
def test_an_upload_interrupted_at_close_is_made_by_the_next_close(s3_server, s3_bucket, here,
                                                                  monkeypatch):
    """Ctrl-C during close()'s upload. Was: the interrupt said nothing of the copy kept, and a
    second close() returned as if the store were published, with nothing at the URL."""
    from zrecord._objects import Client

    url = s3_bucket.url("interrupted")
    opts = _options(s3_server, cache_dir=str(here / "cache"))
    real = Client.put

    def interrupted(self, name, data, **kw):  # type: ignore[no-untyped-def]
        if name.endswith("index.zri"):
            raise KeyboardInterrupt("Ctrl-C during the upload")
        return real(self, name, data, **kw)

    w = Dense.create(url, np.int32, (2, 3), codec="raw", storage_options=opts)
    w.append(DATA)
    monkeypatch.setattr(Client, "put", interrupted)
    with pytest.raises(KeyboardInterrupt) as info:
        w.close()
    assert any("was not published" in note and "close() again uploads it" in note
               for note in getattr(info.value, "__notes__", []))  # 3.10 too: no add_note there
    monkeypatch.setattr(Client, "put", real)
    w.close()  # uploads the kept copy
    with Dense.open(url, storage_options=_options(s3_server)) as ds:
        np.testing.assert_array_equal(ds[:], DATA)
    assert not [p for p in (here / "cache").iterdir()]  # the kept copy went once uploaded
    w.close()  # idempotent


def _interrupted_after(real, suffix):
    """Client.put that sends the object, then raises KeyboardInterrupt (a Ctrl-C that arrived
    while the request was under way, raised once it returned), for the first name ending in
    `suffix`."""
    hits = []

    def put(self, name, data, **kw):  # type: ignore[no-untyped-def]
        etag = real(self, name, data, **kw)
        if name.endswith(suffix) and not hits:
            hits.append(name)
            raise KeyboardInterrupt("Ctrl-C")
        return etag
    return put


@pytest.mark.remote
def test_an_interrupt_that_lands_after_the_claim_or_the_header_says_what_happened(
        s3_server, s3_bucket, here, tmp_path, monkeypatch):
    """Found in review (an interrupt campaign). Was: a Ctrl-C during the claim's PUT left the
    claim taken (the prefix refused for 30 minutes, to the publisher that was interrupted); a
    Ctrl-C during the header's PUT said "was not published" and kept the staged copy (a second
    close() then failed with StoreExistsError), and publish_folder listed the store among those
    not published, while each store was published and complete."""
    from zrecord import publish_folder
    from zrecord._objects import Client

    real = Client.put
    opts = _options(s3_server, cache_dir=str(here / "cache"))
    with Dense.create(tmp_path / "s", np.int32, (2, 3), codec="raw") as w:
        w.append(DATA)
    # The claim: released, so that publishing again goes on at once.
    url = s3_bucket.url("claimed")
    monkeypatch.setattr(Client, "put", _interrupted_after(real, "publish.claim"))
    with pytest.raises(KeyboardInterrupt):
        publish(tmp_path / "s", url, storage_options=opts)
    monkeypatch.setattr(Client, "put", real)
    publish(tmp_path / "s", url, storage_options=opts)
    # The header, by publish: the interrupt says the store is published.
    url = s3_bucket.url("headed")
    monkeypatch.setattr(Client, "put", _interrupted_after(real, "header.zrh"))
    with pytest.raises(KeyboardInterrupt) as info:
        publish(tmp_path / "s", url, storage_options=opts)
    assert any("was published before the interrupt" in n for n in info.value.__notes__)
    monkeypatch.setattr(Client, "put", real)
    with Dense.open(url, storage_options=_options(s3_server)) as ds:
        np.testing.assert_array_equal(ds[:], DATA)
    # The header, by a writer's close(): no copy kept, and close() again is done.
    url = s3_bucket.url("written")
    w = Dense.create(url, np.int32, (2, 3), codec="raw", storage_options=opts)
    w.append(DATA)
    monkeypatch.setattr(Client, "put", _interrupted_after(real, "header.zrh"))
    with pytest.raises(KeyboardInterrupt) as info:
        w.close()
    monkeypatch.setattr(Client, "put", real)
    assert not any("not published" in n for n in info.value.__notes__)
    w.close()
    assert not [p for p in (here / "cache").iterdir() if p.name.startswith("zrecord-create-")]
    with Dense.open(url, storage_options=_options(s3_server)) as ds:
        np.testing.assert_array_equal(ds[:], DATA)
    # The header of a folder's first store: counted as published.
    folder = tmp_path / "folder"
    for name in ("a", "b"):
        with Dense.create(folder / name, np.int32, (2, 3), codec="raw") as w:
            w.append(DATA)
    monkeypatch.setattr(Client, "put", _interrupted_after(real, "header.zrh"))
    with pytest.raises(KeyboardInterrupt) as info:
        publish_folder(folder, s3_bucket.url("folder"), storage_options=opts)
    assert any("published: ['a']; not published: ['b']" in n for n in info.value.__notes__), \
        info.value.__notes__


@pytest.mark.remote
def test_a_bucket_that_does_not_exist_fails_create_at_once(s3_server, here, tmp_path):
    """Was: create and check_destination passed (the bucket's 404 read as "no store there"),
    and close() and publish() failed after the write with obstore's raw FileNotFoundError."""
    from zrecord import check_destination
    from zrecord.errors import RemoteError

    url = "s3://no-such-bucket-zr/x"
    said = r"s3://no-such-bucket-zr/x: the bucket 'no-such-bucket-zr' does not exist \(create it"
    with pytest.raises(RemoteError, match=said):
        Dense.create(url, np.int32, (2, 3), codec="raw", storage_options=_options(s3_server))
    with pytest.raises(RemoteError, match=said):
        check_destination(url, storage_options=_options(s3_server))
    with Dense.create(tmp_path / "s", np.int32, (2, 3), codec="raw") as w:
        w.append(DATA)
    with pytest.raises(RemoteError, match=said):
        publish(tmp_path / "s", url, storage_options=_options(s3_server))
    _no_scheme_folders(here)


@pytest.mark.remote
def test_a_relative_cache_dir_is_taken_at_create(s3_server, s3_bucket, here):
    url = s3_bucket.url("relative")
    os.mkdir("elsewhere")
    w = Dense.create(url, np.int32, (2, 3), codec="raw",
                     storage_options=_options(s3_server, cache_dir="cache"))
    w.append(DATA)
    os.chdir("elsewhere")
    w.close()  # was: StoreNotFoundError, the staged store looked for under elsewhere/cache
    with Dense.open(url, storage_options=_options(s3_server)) as ds:
        np.testing.assert_array_equal(ds[:], DATA)
    assert os.listdir(".") == []


@pytest.mark.remote
def test_nothing_is_created_inside_a_published_store_by_url(s3_server, s3_bucket, here):
    """As a local path inside a store is refused. Was: accepted, the new store's objects
    added under the published store's prefix."""
    from zrecord.errors import ImmutableStoreError

    url = s3_bucket.url("outer")
    with Dense.create(url, np.int32, (2, 3), codec="raw", storage_options=_options(s3_server)) as w:
        w.append(DATA)
    for inner in (f"{url}/inner", f"{url}/a/b"):
        with pytest.raises(ImmutableStoreError, match=r"lies inside the published store "
                           + re.escape(url)):
            Dense.create(inner, np.int32, (2, 3), codec="raw", storage_options=_options(s3_server))
    with Dense.create(s3_bucket.url("outer2/inner"), np.int32, (2, 3), codec="raw",
                      storage_options=_options(s3_server)) as w:  # beside it: fine
        w.append(DATA)


@pytest.mark.remote
def test_nothing_is_published_inside_a_store_at_the_buckets_root(s3_server, s3_bucket, here):
    """Was: the check looked at every level above the destination but the bucket's root, so
    s3://BUCKET/sub was published inside the store at s3://BUCKET."""
    from zrecord.errors import ImmutableStoreError

    root = "s3://" + s3_bucket.name
    with Dense.create(root, np.int32, (2, 3), codec="raw", storage_options=_options(s3_server)) as w:
        w.append(DATA)
    for inner in (f"{root}/sub", f"{root}/x/y"):
        with pytest.raises(ImmutableStoreError, match=r"lies inside the published store"):
            Dense.create(inner, np.int32, (2, 3), codec="raw", storage_options=_options(s3_server))


@pytest.mark.remote
def test_a_store_is_not_published_over_stores_or_files_below_its_prefix(s3_server, s3_bucket, here):
    """As a local path that exists is refused. Was: published, so that the stores below became
    stores inside a store (which is refused in the other order, above), and the files below
    part of the store's prefix."""
    opts = _options(s3_server)
    url = s3_bucket.url("shelf")
    with Dense.create(f"{url}/train", np.int32, (2, 3), codec="raw", storage_options=opts) as w:
        w.append(DATA)
    with pytest.raises(StoreExistsError, match=r"shelf holds stores below it: 'train'; a store "
                       r"is published to a prefix of its own"):
        Dense.create(url, np.int32, (2, 3), codec="raw", storage_options=opts)
    staged = here / "staged"
    with Dense.create(staged, np.int32, (2, 3), codec="raw") as w:
        w.append(DATA)
    with pytest.raises(StoreExistsError, match=r"holds stores below it: 'train'"):
        publish(staged, url, storage_options=opts)
    assert "shelf/header.zrh" not in s3_bucket.keys("shelf/")
    # A file below the prefix, too; what an interrupted upload of a store left (its own
    # names) is not in the way: publishing again replaces it.
    s3_bucket.put("notes/readme.txt", b"mine")
    with pytest.raises(StoreExistsError, match=r"notes holds objects that are not a store's: "
                       r"'readme.txt'"):
        publish(staged, s3_bucket.url("notes"), storage_options=opts)
    # A console's "Create folder" marker holds nothing (found in review: it was refused,
    # named '').
    s3_bucket.put("marked/", b"")
    publish(staged, s3_bucket.url("marked"), storage_options=opts)
    s3_bucket.put("left/data-000.zrd", b"an interrupted upload's")
    s3_bucket.put("left/index.zri", b"an interrupted upload's")
    publish(staged, s3_bucket.url("left"), storage_options=opts)
    with Dense.open(s3_bucket.url("left"), storage_options=opts) as ds:
        np.testing.assert_array_equal(ds[:], DATA)


@pytest.mark.parametrize("url", ["s3://b/v1?versionId=3", "s3://b/v1#x"])
def test_a_query_or_fragment_in_a_destination_is_refused(url, here):
    """Was: published under the key 'v1?versionId=3/', reported as s3://b/v1."""
    with pytest.raises(ValueError, match="an s3:// URL takes no query string or fragment"):
        Dense.create(url, np.int32, (2, 3), codec="raw")
    _no_scheme_folders(here)


@pytest.mark.remote
def test_a_failed_upload_keeps_the_staged_store_and_says_where(s3_server, s3_bucket, here):
    """Another writer publishes at the URL between create and close: the upload is refused,
    nothing of this store is published, and the staged copy is kept (and named) so that the
    write need not be done again."""
    url = s3_bucket.url("raced")
    opts = _options(s3_server, cache_dir=str(here / "cache"))
    w = Dense.create(url, np.int32, (2, 3), codec="raw", storage_options=opts)
    w.append(DATA)
    with Dense.create(url, np.int32, (2, 3), codec="raw", storage_options=opts) as other:
        other.append(DATA[:1])
    with pytest.raises(StoreExistsError) as info:
        w.close()
    message = str(info.value)
    assert url in message and "was not published" in message and "is kept at" in message
    kept = message.split("is kept at '")[1].split("'")[0]
    w.abort()  # after a failed upload, abort leaves the kept copy alone
    with Dense.open(kept) as ds:
        np.testing.assert_array_equal(ds[:], DATA)
    with Dense.open(url, storage_options=_options(s3_server)) as ds:
        assert len(ds) == 1  # the other writer's store, untouched
    publish(kept, s3_bucket.url("retried"), storage_options=_options(s3_server))
    with Dense.open(s3_bucket.url("retried"), storage_options=_options(s3_server)) as ds:
        np.testing.assert_array_equal(ds[:], DATA)


@pytest.mark.remote
def test_the_staging_of_a_killed_url_writer_is_removed_by_the_next_create(s3_server, s3_bucket,
                                                                         here):
    """Found in review. Was: a writer to an s3:// URL killed while it wrote (SIGKILL, the
    out-of-memory killer) left its staged store in cache_dir (or TMPDIR) forever: every writer
    staged in a fresh folder, and nothing removed another's. Now each staging folder is locked
    while its writer lives, and the next create by URL there removes one whose process died;
    a store kept after a failed upload is left alone."""
    import json
    import subprocess
    import sys

    cache = here / "cache"
    opts = _options(s3_server, cache_dir=str(cache))
    script = (
        "import json, os, sys, numpy as np\n"
        "from zrecord import Dense\n"
        "w = Dense.create(sys.argv[1], np.int32, (2, 3), codec='raw',"
        " storage_options=json.loads(sys.argv[2]))\n"
        "w.append(np.zeros((1000, 2, 3), np.int32))\n"
        "os._exit(9)  # as a SIGKILL: no finalizer, no close\n")
    done = subprocess.run([sys.executable, "-c", script, s3_bucket.url("killed"), json.dumps(opts)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 9, done.stderr
    left = sorted(p.name for p in cache.iterdir())
    assert len([n for n in left if n.startswith("zrecord-create-")]) == 2, left  # folder, lock
    with Dense.create(s3_bucket.url("next"), np.int32, (2, 3), codec="raw",
                      storage_options=opts) as w:
        w.append(DATA)
        assert len(os.listdir(cache)) == 2  # its own folder and lock: the dead one's are gone
    assert os.listdir(cache) == []


def test_http_urls_cannot_be_written(here):
    for url in ("https://example.invalid/x", "http://127.0.0.1:9/x"):
        with pytest.raises(ValueError, match="reads but cannot write"):
            Dense.create(url, np.int32, (2, 3), codec="raw")
    assert os.listdir(here) == []


@pytest.mark.parametrize("url", ["gs://bucket/x", "az://account/x", "xyz://h/x", "S3://b/x"])
def test_a_scheme_zrecord_does_not_read_is_refused_everywhere(url, here, capsys):
    for call in (lambda: Dense.create(url, np.int32, (2, 3), codec="raw"),
                 lambda: Ragged.create(url, np.int32, 1, codec="raw"),
                 lambda: Dense.open(url), lambda: open_store(url),
                 lambda: publish(url, "s3://b/p"), lambda: publish(here, url)):
        with pytest.raises(ValueError, match="a scheme zrecord does not read"):
            call()
    for command in ("info", "verify", "head", "stats"):
        assert main([command, url]) == 2  # a usage error, not "no store at 'gs://...'"
        assert "a scheme zrecord does not read" in capsys.readouterr().err
    assert main(["publish", str(here), url, "-q"]) == 2
    _no_scheme_folders(here)
    assert os.listdir(here) == []


@pytest.mark.parametrize("given", [Path("s3://my-bucket/corpora") / "ids", "s3:/my-bucket/other",
                                   Path("https://host/s")])
def test_a_url_whose_slashes_a_path_joined_is_refused_not_made_a_folder(given, here, capsys):
    """Was: Dense.create(Path("s3://b/x") / "ids") made the local folder ./s3:/b/x/ids (a
    pathlib.Path writes "s3://" as "s3:/"), as a str URL once did ([U3])."""
    for call in (lambda: Dense.create(given, np.int32, (2,), codec="raw"),
                 lambda: Ragged.create(given, np.int32, 1, codec="raw"),
                 lambda: open_store(given), lambda: publish(here, given)):
        with pytest.raises(ValueError, match=r"is the URL '(s3|https)://.*' with its '//' made "
                           r"'/' \(a pathlib.Path writes"):
            call()
    assert main(["info", str(given)]) == 2
    _no_scheme_folders(here)
    assert os.listdir(here) == []


def test_storage_options_with_a_local_path_are_an_error(here):
    path = here / "local"
    with pytest.raises(ValueError, match=r"storage_options were given with the local path .*local'"):
        Dense.create(path, np.int32, (2, 3), codec="raw", storage_options={"region": "eu-west-1"})
    assert not path.exists()
    with Dense.create(path, np.int32, (2, 3), codec="raw", index_cache=None) as w:
        w.append(DATA)
    for open_ in (Dense.open, open_store):
        with pytest.raises(ValueError, match="storage_options were given with the local path"):
            open_(path, storage_options={"endpoint_url": "http://127.0.0.1:9"})

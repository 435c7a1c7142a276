"""[U3] issue 40 point 4: ``zrecord publish`` of a folder of stores (the converter's output)
was refused with a misleading message, publishing over an existing store exited 2 (the usage
error status) and ``--json`` printed nothing on an error. A folder of stores is now published
store by store with a report, files such as ``provenance.json`` last; a destination that
holds a store exits 4 (documented in ``--help``), and ``--json`` prints a result for errors too.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import zrecord
import zrecord._publish as pub
from zrecord import Dense, Ragged, publish
from zrecord.cli import main
from zrecord.errors import ChecksumError, NotPublishedError, StoreExistsError

pytestmark = pytest.mark.remote

PROVENANCE = b'{"format": "loaderx-converter provenance 1"}\n'


def _options(s3_server):
    creds = s3_server.credentials
    return {"endpoint_url": s3_server.endpoint_url, "region": creds.region,
            "aws_access_key_id": creds.access_key_id,
            "aws_secret_access_key": creds.secret_access_key}


@pytest.fixture
def dataset(tmp_path):
    """A folder laid out as the converter writes one: ROOT/split/column, provenance.json."""
    root = tmp_path / "mnist"
    for split, n in (("train", 5), ("test", 2)):
        with Dense.create(root / split / "image", np.uint8, (2, 2), codec="raw",
                          index_cache=None) as w:
            w.append(np.full((n, 2, 2), n, np.uint8))
        with Ragged.create(root / split / "label", np.int64, 1, codec="zstd",
                           index_cache=None) as w:
            w.append([np.arange(k) for k in range(n)])
    (root / "provenance.json").write_bytes(PROVENANCE)
    return root


STORES = ["test/image", "test/label", "train/image", "train/label"]


def test_a_folder_of_stores_is_published_with_its_files_last(s3_server, s3_bucket, dataset,
                                                             monkeypatch):
    opts = _options(s3_server)
    url = s3_bucket.url("mnist")
    with pytest.raises(ValueError, match=r"is a folder, not a store .*zrecord.publish_folder"):
        publish(dataset, url, storage_options=opts)
    order = []
    real_put = pub.Client.put

    def put(client, name, data, **kw):
        if name in ("header.zrh", "provenance.json"):
            order.append(f"{client.url.split('/mnist')[1]}/{name}")
        return real_put(client, name, data, **kw)

    monkeypatch.setattr(pub.Client, "put", put)
    digests = pub.publish_folder(dataset, url, storage_options=opts)
    assert list(digests) == STORES
    assert order == [f"/{s}/header.zrh" for s in STORES] + ["/provenance.json"]
    for rel, digest in digests.items():
        with (Dense if rel.endswith("image") else Ragged).open(f"{url}/{rel}",
                                                              storage_options=opts) as ds:
            assert ds.digest == digest
    assert s3_bucket.get("mnist/provenance.json") == PROVENANCE
    # Again: everything is there with the same bytes, so nothing is uploaded.
    order.clear()
    assert pub.publish_folder(dataset, url, storage_options=opts) == digests
    assert order == []
    # check_destination(files=...): a folder's file published there is found before any
    # write (the converter asks, so that another conversion to the prefix fails at once).
    with pytest.raises(StoreExistsError, match=r"mnist/provenance.json exists"):
        zrecord.check_destination(url, storage_options=opts, files=["provenance.json"],
                                  folder=True)
    zrecord.check_destination(url, storage_options=opts, files=["other.json"], folder=True)


def test_a_folder_publish_that_failed_goes_on_where_it_stopped(s3_server, s3_bucket, dataset,
                                                               monkeypatch):
    opts = _options(s3_server)
    url = s3_bucket.url("resumed")
    real = pub.publish

    def fails_at_train_image(source, *args, **kw):
        if str(source).endswith("train/image"):
            raise ChecksumError("simulated damage")
        return real(source, *args, **kw)

    monkeypatch.setattr(pub, "publish", fails_at_train_image)
    with pytest.raises(ChecksumError) as info:
        pub.publish_folder(dataset, url, storage_options=opts)
    assert ("stopped at the store 'train/image'; published: ['test/image', 'test/label']; not "
            "published: ['train/image', 'train/label']") in str(info.value)
    assert "resumed/provenance.json" not in s3_bucket.keys("resumed/")
    monkeypatch.setattr(pub, "publish", real)
    assert list(pub.publish_folder(dataset, url, storage_options=opts)) == STORES


def test_a_folder_is_refused_whole_before_any_upload(s3_server, s3_bucket, dataset):
    opts = _options(s3_server)
    url = s3_bucket.url("taken")
    with Dense.create(dataset / "extra", np.uint8, (), codec="raw", index_cache=None) as w:
        w.append(np.zeros(3, np.uint8))
    publish(dataset / "extra", f"{url}/extra", storage_options=opts)
    (dataset / "extra").rename(dataset / "moved")
    with Dense.create(dataset / "extra", np.uint8, (), codec="raw", index_cache=None) as w:
        w.append(np.ones(3, np.uint8))  # another store where one is published
    keys = s3_bucket.keys("taken/")
    with pytest.raises(StoreExistsError, match="taken/extra already holds a published store"):
        pub.publish_folder(dataset, url, storage_options=opts)
    assert s3_bucket.keys("taken/") == keys
    unfinished = Dense.create(dataset / "late", np.uint8, (), codec="raw", index_cache=None)
    with pytest.raises(NotPublishedError, match="unfinished or aborted write"):
        pub.publish_folder(dataset, s3_bucket.url("other"), storage_options=opts)
    unfinished.abort()
    assert s3_bucket.keys("other/") == []


def test_the_command_publishes_a_folder_store_by_store(s3_server, s3_bucket, dataset,
                                                        monkeypatch, capsys):
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    url = s3_bucket.url("cli")
    assert main(["publish", str(dataset), url, "-q"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:4] == [f"{s}: published at {url}/{s} (digest "
                       f"{(Dense if s.endswith('image') else Ragged).open(dataset / s).digest})"
                       for s in STORES]
    assert out[4] == f"provenance.json: published at {url}/provenance.json"
    assert main(["publish", str(dataset), url, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["ok"] is True and result["kind"] == "folder"
    assert [(s["path"], s["state"]) for s in result["stores"]] == [
        (s, "already published") for s in STORES]
    assert result["files"][0]["path"] == "provenance.json"


def test_publishing_over_a_store_exits_4_and_json_says_why(s3_server, s3_bucket, dataset,
                                                          monkeypatch, capsys):
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    store, url = dataset / "train" / "image", s3_bucket.url("one")
    assert main(["publish", str(store), url, "-q"]) == 0
    capsys.readouterr()
    assert main(["publish", str(store), url, "--json"]) == 4
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["ok"] is False and result["status"] == 4 and result["url"] == url
    assert "already holds a published store" in result["error"]
    assert captured.err.count("\n") == 1 and "already holds a published store" in captured.err
    assert main(["publish", str(store), "gs://b/x", "--json"]) == 2
    assert "a scheme zrecord does not read" in json.loads(capsys.readouterr().out)["error"]
    assert "4 publish: the URL already holds a published store" in " ".join(_help(capsys).split())


def _help(capsys) -> str:
    with pytest.raises(SystemExit):
        main(["publish", "--help"])
    return capsys.readouterr().out


def test_a_writers_temporary_folder_is_never_uploaded(tmp_path, capsys):
    """A writer killed after writing its header, before its rename, leaves a temporary folder
    that holds a whole store's files. Was: `zrecord info` refused it as an unfinished write,
    but publish() and `zrecord publish` uploaded it as a store. Refused before any request."""
    temporary = tmp_path / ".s.zr-tmp-12345"
    with Dense.create(tmp_path / "s", np.int64, (2,), codec="raw") as w:
        w.append(np.zeros((3, 2), np.int64))
    (tmp_path / "s").rename(temporary)
    with pytest.raises(ValueError, match=r"is a writer's temporary folder, not a published "
                       "store: whether its writer is alive cannot be told"):
        publish(temporary, "s3://bucket/s")
    assert main(["publish", str(temporary), "s3://bucket/s", "-q"]) == 2
    assert "is a writer's temporary folder" in capsys.readouterr().err


def test_info_and_verify_list_and_check_a_published_folder_by_its_prefix(
        s3_server, s3_bucket, dataset, monkeypatch, capsys):
    """Found by a newcomer: a folder published whole could not be checked by URL (`zrecord
    info/verify s3://B/mnist` exited 1: "no header.zrh there, but stores below it"). The
    prefix is now listed as a local folder is walked: info's table, verify of every store,
    a damaged one named."""
    opts = _options(s3_server)
    url = s3_bucket.url("mnist")
    pub.publish_folder(dataset, url, storage_options=opts)
    creds = s3_server.credentials
    for name, value in (("AWS_ACCESS_KEY_ID", creds.access_key_id),
                        ("AWS_SECRET_ACCESS_KEY", creds.secret_access_key),
                        ("AWS_REGION", creds.region)):
        monkeypatch.setenv(name, value)
    endpoint = ["--endpoint-url", s3_server.endpoint_url]
    assert main(["info", url, *endpoint]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{url}: a folder holding 4 stores") and "total: 14 records" in out
    assert main(["info", url, *endpoint, "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert [s["path"] for s in listing["stores"]] == STORES
    sizes = {k.split("/", 1)[1]: len(s3_bucket.get(k)) for k in s3_bucket.keys("mnist/train/image/")}
    assert listing["stores"][2]["disk_bytes"] == sum(sizes.values())
    assert main(["verify", url, *endpoint]) == 0
    assert capsys.readouterr().out.strip().endswith(f"{url}: 4 of 4 stores OK")
    assert main(["verify", url + "/", *endpoint]) == 0  # the prefix's own / at its end
    assert capsys.readouterr().out.strip().endswith("4 of 4 stores OK")
    assert main(["info", url + "/", *endpoint]) == 0
    assert "a folder holding 4 stores" in capsys.readouterr().out
    # One store's shard replaced by other bytes of its size: named, exit 1.
    key = "mnist/train/image/data-000.zrd"
    s3_bucket.put(key, bytes(len(s3_bucket.get(key))))
    assert main(["verify", url, *endpoint]) == 1
    assert "FAILED: train/image" in capsys.readouterr().out
    # A prefix with nothing of a store below it keeps its own error.
    assert main(["info", s3_bucket.url("nothing"), *endpoint]) == 1
    assert "no object under that prefix" in capsys.readouterr().err

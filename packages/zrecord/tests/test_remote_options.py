"""What a store opened by URL takes and says before any request: which paths are URLs, the
storage options it accepts, and messages that never show a secret."""

from __future__ import annotations

import pytest

from zrecord._objects import _first_line, is_url, redact, storage_settings


def test_urls_and_what_messages_show_of_them():
    assert is_url("s3://b/p") and is_url("https://h/p") and is_url("http://h:8/p")
    assert not is_url("/data/s3://x") and not is_url(b"s3://b") and not is_url("file:///x")
    assert redact("https://user:pw@host:8443/a/b?token=s3cr3t#frag") == "https://host:8443/a/b"
    line = _first_line(Exception("GET http://k:secret@h:1/b/obj?X-Amz-Signature=abc failed\nmore"))
    assert line == "GET http://h:1/b/obj failed"


def test_storage_options_are_checked():
    settings = storage_settings({"max_in_flight": 8, "endpoint_url": "http://127.0.0.1:9000"})
    assert settings.max_in_flight == 8 and settings.gap_bytes == "auto"
    assert settings.client == {"endpoint_url": "http://127.0.0.1:9000"}
    with pytest.raises(ValueError, match="unknown storage option 'endpoint'; known: "):
        storage_settings({"endpoint": "x"})
    with pytest.raises(ValueError, match="max_in_flight must be 'auto' or at least 1"):
        storage_settings({"max_in_flight": 0})
    with pytest.raises(ValueError, match="gap_bytes must be 'auto' or at least 0"):
        storage_settings({"gap_bytes": -1})
    assert storage_settings({"cache_bytes": 64 << 20}).cache_bytes == 64 << 20
    with pytest.raises(ValueError, match=r"cache_bytes must be at least 4194304 \(4 MiB"):
        storage_settings({"cache_bytes": 1 << 20})
    with pytest.raises(ValueError, match="cache_bytes must be a number of bytes or None; got '1G'"):
        storage_settings({"cache_bytes": "1G"})


def test_a_credential_of_the_wrong_type_is_a_value_error_naming_the_option_not_the_value():
    """Was: TypeError "'int' object is not an instance of 'str'" from obstore, naming no
    option."""
    with pytest.raises(ValueError, match="storage option aws_secret_access_key must be a str; "
                       "got type int") as info:
        storage_settings({"aws_secret_access_key": 12345678})
    assert "12345678" not in str(info.value)
    with pytest.raises(ValueError, match="storage option skip_signature must be a bool"):
        storage_settings({"skip_signature": "yes"})
    assert storage_settings({"skip_signature": True, "region": None}).client == {"skip_signature": True}


def test_a_url_that_does_not_parse_is_a_value_error_naming_it_without_its_secret():
    """urlsplit's own ValueError ('Invalid IPv6 URL') escaped from the reader's constructor,
    before the URL's check; it now gets the check's message, with no user information."""
    from zrecord import Dense
    from zrecord._objects import redact

    assert redact("http://user:pw@[::1/x") == "http://(a URL that does not parse)"
    for url in ("http://[::1/x", "http://user:pw@[::1/x", "https://h:99999/x"):
        with pytest.raises(ValueError, match="is not a valid URL") as info:
            Dense.open(url)
        assert "pw" not in str(info.value) and "user" not in str(info.value)


@pytest.mark.parametrize(("key", "value"), [("timeout_s", float("inf")), ("retry_timeout_s", 1e20),
                                            ("connect_timeout_s", 1e300)])
def test_a_time_too_long_for_the_client_is_a_value_error_naming_the_option(key, value):
    """Was: OverflowError ('cannot convert float infinity to integer', 'Python int too large')
    from the client's durations, naming no option."""
    with pytest.raises(ValueError, match=f"storage option {key} must be a number of seconds above "
                       "0 and at most 31,536,000"):
        storage_settings({key: value})
    assert storage_settings({key: 31_536_000}).__getattribute__(key) == 31_536_000


def test_cache_dir_is_a_path_with_home_expanded_and_never_empty(monkeypatch, tmp_path):
    """Was: cache_dir='' made a mirror in the working folder, '~/c' a folder named '~' there,
    and 5 a TypeError naming no option."""
    monkeypatch.setenv("HOME", str(tmp_path))
    assert storage_settings({"cache_dir": "~/zr-cache"}).cache_dir == str(tmp_path / "zr-cache")
    assert storage_settings({"cache_dir": tmp_path}).cache_dir == str(tmp_path)
    with pytest.raises(ValueError, match="storage option cache_dir must name a folder; got ''"):
        storage_settings({"cache_dir": ""})
    with pytest.raises(ValueError, match="storage option cache_dir must be a path"):
        storage_settings({"cache_dir": 5})


@pytest.mark.parametrize("endpoint", ["not a url", "", "ftp://h:21", "http://", "http://h st:9000"])
def test_an_endpoint_that_is_no_http_url_is_refused_before_any_request(endpoint, monkeypatch):
    """Was: accepted, and the first request panicked inside the object storage client (a Rust
    panic on stderr, then RemoteError 'a panic in obstore'), naming no setting."""
    from zrecord import Dense

    with pytest.raises(ValueError, match="storage option endpoint_url must be an http:// or https:// URL"):
        Dense.open("s3://bkt/x", storage_options={"endpoint_url": endpoint})


@pytest.mark.remote  # the environment is read by the client, which needs obstore
@pytest.mark.parametrize("endpoint", ["not a url", " ", "ftp://h:21"])
def test_an_endpoint_from_the_environment_that_is_no_http_url_is_refused(endpoint, monkeypatch):
    from zrecord import Dense

    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    with pytest.raises(ValueError, match="the environment's AWS_ENDPOINT_URL must be an http"):
        Dense.open("s3://bkt/x")


def test_a_bucket_name_with_a_space_is_refused_before_any_request():
    from zrecord import Dense

    with pytest.raises(ValueError, match="the bucket 'my bucket' of 's3://my bucket/x' holds a character"):
        Dense.open("s3://my bucket/x", storage_options={"endpoint_url": "http://127.0.0.1:9"})


@pytest.mark.parametrize("given", ["abc", [("retries", 3)], 5])
def test_storage_options_that_are_no_dict_are_a_type_error_saying_so(given):
    """Was: "dictionary update sequence element #0 has length 1; 2 is required" for "abc",
    and a list of pairs taken as options."""
    with pytest.raises(TypeError, match=f"storage_options must be a dict of option names to "
                       f"values, or None; got {type(given).__name__}"):
        storage_settings(given)

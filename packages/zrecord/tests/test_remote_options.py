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

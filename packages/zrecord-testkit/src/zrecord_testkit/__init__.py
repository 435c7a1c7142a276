"""The development test kit of the zrecord monorepo: servers on loopback and a shaped link.

- :mod:`zrecord_testkit.servers`: ``S3Server`` (moto_server, a process), ``RangeHTTPServer``
  (a Range-capable HTTP file server, a thread), a small S3 client on the standard library.
- :mod:`zrecord_testkit.netlink`: ``LinkProxy``, a delaying, rate-limiting TCP proxy; also a
  program (``python -m zrecord_testkit.netlink``).
- :mod:`zrecord_testkit.pytest_plugin`: the fixtures ``s3_server``, ``s3_bucket``,
  ``http_server`` and ``http_folder``, registered with pytest by the package's ``pytest11``
  entry point.

The kit never imports zrecord or loaderx: it serves bytes and shapes links, and the suites that
use it bring the clients. Nothing is imported here, so that loading the pytest plugin does not
load the servers until a test asks for one.
"""

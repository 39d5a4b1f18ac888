"""A real S3 endpoint for the object-store tests: moto's server on 127.0.0.1, in a thread.

:func:`s3_server` starts one, sets the standard AWS variables (credentials, region and
``AWS_ENDPOINT_URL``) for this process and the processes it starts, and restores them
afterwards; :func:`new_bucket` creates an empty bucket.  The secret key is a marker the
tests look for in every file written and every message printed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets

import pytest

SECRET = "evalkit-test-secret-" + "5e" * 8


@contextlib.contextmanager
def s3_server():
    server_mod = pytest.importorskip("moto.server", reason="moto[server] is not installed "
                                     "(pip install -e '.[dev]')")
    pytest.importorskip("flask", reason="moto's server mode needs moto[server]")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {"AWS_ACCESS_KEY_ID": "evalkit-test-key", "AWS_SECRET_ACCESS_KEY": SECRET,
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://{host}:{port}"}
    saved = {k: os.environ.get(k) for k in (*env, "AWS_ENDPOINT_URL_S3", "AWS_REGION",
                                            "AWS_SESSION_TOKEN", "AWS_PROFILE")}
    for key in ("AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        os.environ.pop(key, None)
    os.environ.update(env)
    try:
        yield env
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.stop()


def new_bucket(prefix: str = "evalkit") -> str:
    """An empty bucket on the server :func:`s3_server` started; returns its name."""
    import pyarrow.fs as pafs

    name = f"{prefix}-{secrets.token_hex(4)}"
    endpoint = os.environ["AWS_ENDPOINT_URL"].split("://", 1)[1]
    pafs.S3FileSystem(endpoint_override=endpoint, scheme="http", region="us-east-1",
                      allow_bucket_creation=True).create_dir(name)
    return name

"""Run ``phoenix serve`` with BOTH its ports on loopback (run by the Phoenix venv's python).

``PHOENIX_HOST`` binds the HTTP port (UI, REST, OTLP/HTTP) only; Phoenix 20.x binds its OTLP/gRPC
port to ``[::]`` whatever the variable says (``phoenix/server/grpc_server.py``). This shim makes
every gRPC server of the process bind ``127.0.0.1`` instead, then hands over to Phoenix's own
``main``. Nothing else changes.
"""

import sys

import grpc.aio

_server = grpc.aio.server


def _loopback_server(*args, **kwargs):  # type: ignore[no-untyped-def]
    server = _server(*args, **kwargs)
    add_insecure, add_secure = server.add_insecure_port, server.add_secure_port
    server.add_insecure_port = lambda address: add_insecure(address.replace("[::]", "127.0.0.1"))
    server.add_secure_port = lambda address, creds: add_secure(
        address.replace("[::]", "127.0.0.1"), creds)
    return server


grpc.aio.server = _loopback_server

from phoenix.server.main import main  # noqa: E402  (after the patch, on purpose)

sys.argv = ["phoenix", "serve"]
sys.exit(main())

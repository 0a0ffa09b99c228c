"""The gRPC servers ``mmgate extproc --grpc`` chooses between, named apart from the servers
themselves so the command's ``--help`` (and ``--print-envoy-config``) work without the extproc
extra (grpcio and Envoy's protobufs), which only serving needs."""

from __future__ import annotations

from typing import Literal

TRANSPORTS = ("lean", "grpcio")
Transport = Literal["lean", "grpcio"]

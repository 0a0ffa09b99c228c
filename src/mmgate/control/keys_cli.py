"""``mmgate keys``: make entries for the gateway's API-keys file (``mmgate.auth.keysFile``).

``add`` draws a new random key (``secrets``, 32 bytes, URL-safe), appends its digest with a tenant
and limits to the file, and prints the key once: the file never holds it, so it cannot be shown
again. ``hash`` prints the digest of a key you already have (read from stdin, so it stays out of
the shell history and the process list), for writing the entry yourself.
"""

from __future__ import annotations

import argparse
import secrets
import sys
from pathlib import Path

import yaml

from mmgate.control.apikeys import hash_key, load_keys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = sub.add_parser("add", help="draw a new key, append its entry to FILE, print the key once")
    add.add_argument("file", type=Path, help="the keys file (created if missing)")
    add.add_argument("--tenant", required=True, help="who the key belongs to (given to plugins)")
    add.add_argument("--rate", type=float, default=0.0, help="requests per second (0: no limit)")
    add.add_argument("--burst", type=float, default=0.0, help="requests at once above the rate")
    add.add_argument("--max-inflight", type=int, default=0, help="requests in flight at once (0: none)")
    default = add.add_mutually_exclusive_group()
    default.add_argument(
        "--objective", help="flow control: the InferenceObjective of the key's requests that name none"
    )
    default.add_argument(
        "--priority", type=int, help="flow control: the priority of the key's requests that name no objective"
    )
    sub.add_parser("hash", help="print the sha256 entry of a key read from stdin")


def run(args: argparse.Namespace) -> int:
    if args.action == "hash":
        key = sys.stdin.readline().strip()
        if not key:
            print("mmgate keys hash: give the key on stdin (echo -n KEY | mmgate keys hash)", file=sys.stderr)
            return 2
        print(hash_key(key))
        return 0
    if args.rate < 0 or args.burst < 0 or args.max_inflight < 0:
        print("mmgate keys add: --rate, --burst and --max-inflight must not be negative", file=sys.stderr)
        return 2
    path: Path = args.file
    data: dict[str, list[dict[str, object]]] = {"keys": []}
    if path.exists():
        try:
            load_keys(path)  # refuse to append to a file the gateway would not load
        except ValueError as exc:
            print(f"mmgate keys add: {exc}", file=sys.stderr)
            return 2
        data = yaml.safe_load(path.read_text()) or {"keys": []}
        data.setdefault("keys", [])
    key = "mmg-" + secrets.token_urlsafe(32)
    entry: dict[str, object] = {"sha256": hash_key(key), "tenant": args.tenant}
    if args.rate:
        entry["requestsPerSecond"] = args.rate
    if args.burst:
        entry["burst"] = args.burst
    if args.max_inflight:
        entry["maxInflight"] = args.max_inflight
    if args.objective:
        entry["objective"] = args.objective
    if args.priority is not None:
        entry["priority"] = args.priority
    data["keys"].append(entry)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(yaml.safe_dump(data, sort_keys=False))
    tmp.replace(path)  # atomic: a gateway reloading meanwhile sees the old file or the new one
    print(key)
    print(f"added a key for tenant {args.tenant!r} to {path}; it is shown only now", file=sys.stderr)
    return 0

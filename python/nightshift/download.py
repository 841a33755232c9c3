"""The verified download of a job's model folder (JobService.GetArtifacts), as
`nightshift job artifacts` does it (cli/verbs/job.cc): into a hidden folder beside the
destination, every chunk's file listed in checksums.json and in order of offset, every
file's size and digest checked and no other file there, then renamed into place; on any
failure nothing is left behind."""
from __future__ import annotations

import json
import os
import re
import shutil
from typing import Dict, Iterable, Tuple

from nightshift.model import DIGESTS, file_digest
from nightshift.errors import DownloadCorrupt, SettingsError
from nightshift.v1 import jobs_pb2

CHECKSUMS_FILE = "checksums.json"


def parse_checksums(text: str) -> Tuple[str, Dict[str, Tuple[int, str]]]:
    """checksums.json -> (algorithm, {file: (bytes, hex)}); DownloadCorrupt naming what is wrong."""
    try:
        j = json.loads(text)
    except ValueError:
        j = None
    if not isinstance(j, dict):
        raise DownloadCorrupt(f"{CHECKSUMS_FILE} is not a JSON object")
    algorithm = j.get("algorithm")
    if algorithm not in DIGESTS:
        raise DownloadCorrupt(f'{CHECKSUMS_FILE}: algorithm {json.dumps(algorithm)} is neither "sha256" nor "sha1"')
    files = j.get("files")
    if not isinstance(files, dict):
        raise DownloadCorrupt(f'{CHECKSUMS_FILE}: "files" must be an object')
    out: Dict[str, Tuple[int, str]] = {}
    for name, f in files.items():
        if (name in ("", ".", "..", CHECKSUMS_FILE) or len(name) > 255
                or any(c in '/\\:\x7f' or ord(c) < 0x20 for c in name)):
            raise DownloadCorrupt(f"{CHECKSUMS_FILE}: '{name}' is not a plain file name")
        size, digest = (f.get("bytes"), f.get(algorithm)) if isinstance(f, dict) else (None, None)
        if not isinstance(size, int) or isinstance(size, bool) or size < 0 or not isinstance(digest, str):
            raise DownloadCorrupt(f'{CHECKSUMS_FILE}: {name} needs "bytes" and "{algorithm}"')
        if not re.fullmatch(f"[0-9a-f]{{{2 * DIGESTS[algorithm]().digest_size}}}", digest):
            raise DownloadCorrupt(f"{CHECKSUMS_FILE}: {name}: {algorithm} \"{digest}\" is not lower-case hex")
        out[name] = (size, digest)
    return algorithm, out


def verify(folder: str) -> None:
    """Every file checksums.json lists has its size and digest, and no other file is there."""
    try:
        with open(os.path.join(folder, CHECKSUMS_FILE), encoding="utf-8") as f:
            algorithm, sums = parse_checksums(f.read())
    except OSError as e:
        raise DownloadCorrupt(f"{CHECKSUMS_FILE} missing in {folder}") from e
    for name, (size, digest) in sums.items():
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            raise DownloadCorrupt(f"{name}: missing")
        if os.path.getsize(path) != size:
            raise DownloadCorrupt(f"{name}: {os.path.getsize(path)} bytes, {CHECKSUMS_FILE} says {size}")
        _, got = file_digest(path, algorithm)
        if got != digest:
            raise DownloadCorrupt(f"{name}: {algorithm} {got}, {CHECKSUMS_FILE} says {digest}")
    for name in os.listdir(folder):
        if name != CHECKSUMS_FILE and name not in sums:
            raise DownloadCorrupt(f"{name}: not in {CHECKSUMS_FILE}")


def receive(chunks: Iterable[jobs_pb2.ArtifactChunk], folder: str) -> Tuple[str, int]:
    """Writes the stream's files into `folder`; returns (checksums.json's text, step).
    An empty stream returns ("", 0): the call failed and the caller raises its error."""
    sums: Dict[str, Tuple[int, str]] = {}
    checksums_json, step = "", 0
    written: Dict[str, int] = {}
    first = True
    for chunk in chunks:
        if first:
            _, sums = parse_checksums(chunk.checksums_json)
            checksums_json, step, first = chunk.checksums_json, chunk.step, False
            continue
        name = chunk.file
        if name not in sums:
            raise DownloadCorrupt(f"the coordinator sent '{name}', not in {CHECKSUMS_FILE}")
        if chunk.offset != written.get(name, 0):
            raise DownloadCorrupt(f"{name}: a chunk out of order")
        with open(os.path.join(folder, name), "ab" if name in written else "wb") as f:
            f.write(chunk.data)
        written[name] = written.get(name, 0) + len(chunk.data)
    for name in sums:
        if name not in written:  # verify() names it missing or wrong
            open(os.path.join(folder, name), "wb").close()
    return checksums_json, step


def prepare(dest: str) -> str:
    """Checks that `dest` does not exist; returns the hidden folder to download into."""
    if os.path.lexists(dest):
        raise SettingsError(f"{dest} already exists: remove it or choose another dir")
    parent = os.path.dirname(os.path.abspath(dest))
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{os.path.basename(os.path.abspath(dest))}.partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    os.mkdir(tmp)
    return tmp

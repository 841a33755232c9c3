#!/usr/bin/env python3
"""A fake Kubernetes API server for tests of coordinator/kubernetes.h, stdlib only.

Serves, on 127.0.0.1 and a port it picks (printed as the first line of stdout), the
part of the API that --cluster kubernetes uses, with the API's own rules for it:

  POST   /api/v1/namespaces/NS/services|secrets    201 (metadata.uid set), or 409 AlreadyExists
  POST   /apis/batch/v1/namespaces/NS/jobs          201, or 409; 422 without spec.template
  GET    .../services|secrets|jobs/NAME             the object, or 404 NotFound
  PATCH  .../services|secrets|jobs/NAME             a JSON merge patch (RFC 7386; 415 for any
                                                    other Content-Type, as the real server)
  DELETE .../services|secrets|jobs/NAME             200, or 404 NotFound; the objects whose
         metadata.ownerReferences name the deleted one's uid go with it (the garbage
         collector's work, done at once here)
  GET    .../jobs?labelSelector=K%3DV               a JobList with metadata.resourceVersion
  GET    .../jobs?...&watch=1&resourceVersion=RV    the events after RV as JSON lines
         (ADDED, MODIFIED, DELETED; BOOKMARK when asked), then the stream ends after
         timeoutSeconds or as soon as there was one; an ERROR event with code 410 when RV
         is older than the compacted history (the real server's "too old resource version")

Options, as an in-cluster API server: `--tls DIR` serves https with DIR/server.crt and
DIR/server.key (scripts/make-test-ca.sh); `--token T` (repeatable) answers 401
Unauthorized, as the real server, to any request without `Authorization: Bearer T` for
one of them (test controls included).

Every change takes the next resourceVersion. Test controls (not Kubernetes):
  POST /_test/jobs/NS/NAME/status   body: a Job status object (sets it, a MODIFIED event)
  POST /_test/compact               forgets the history: older watches get 410
  GET  /_test/objects/KIND/NS/NAME   the stored object (KIND: jobs, services, secrets), or 404
  POST /_test/forbid/KIND             creating KIND answers RBAC's 403 from now on (again: not)
  POST /_test/deny/KIND               creating KIND answers an admission webhook's 403 (again: not)
  POST /_test/fail/KIND               creating KIND stores it, then answers 500 (again: not)
  POST /_test/forbid-patch/KIND       patching KIND answers 403 from now on (again: not)
  POST /_test/forbid-delete/KIND      deleting KIND answers 403 from now on (again: not)
  POST /_test/quota/KIND              creating KIND answers 403 "exceeded quota" (again: not)
  GET  /_test/requests              every request so far, as [method, path, body]
"""

from __future__ import annotations

import argparse
import json
import ssl
import sys
import uuid
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Condition()
TOKENS: list = []  # --token: the bearer tokens accepted (none: any request)
STATE = {"rv": 100, "objects": {}, "events": [], "compacted": 0, "requests": [], "forbidden": set(),
         "forbidden_patch": set(), "forbidden_delete": set(), "quota": set(), "denied": set(), "failing": set()}


def _status(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
            "reason": reason, "message": message}


def _bump(obj: dict, kind: str) -> None:
    STATE["rv"] += 1
    obj.setdefault("metadata", {})["resourceVersion"] = str(STATE["rv"])
    STATE["events"].append((STATE["rv"], kind, json.loads(json.dumps(obj))))
    LOCK.notify_all()


def _merge(target: dict, patch: dict) -> None:
    """RFC 7386: objects merged key by key, null removes, anything else replaces."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = value


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, code: int, body) -> None:
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> str:
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n).decode() if n else ""

    def _route(self, method: str) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        parts = url.path.strip("/").split("/")
        body = self._body()
        if TOKENS and self.headers.get("Authorization") not in ["Bearer " + t for t in TOKENS]:
            return self._send(401, _status(401, "Unauthorized", "Unauthorized"))
        with LOCK:
            STATE["requests"].append([method, self.path, body])
        if parts[0] == "_test":
            return self._test(method, parts, body)
        # /api/v1/namespaces/NS/services[/NAME] or /apis/batch/v1/namespaces/NS/jobs[/NAME]
        base = 2 if parts[0] == "api" else 3
        if len(parts) < base + 3 or parts[base] != "namespaces":
            return self._send(404, _status(404, "NotFound", "no such path " + url.path))
        ns, kind = parts[base + 1], parts[base + 2]
        name = parts[base + 3] if len(parts) > base + 3 else None
        with LOCK:
            if method == "POST" and name is None:
                obj = json.loads(body)
                key = (kind, ns, obj["metadata"]["name"])
                if kind in STATE["forbidden"]:  # as RBAC words it
                    return self._send(403, _status(403, "Forbidden", f'{kind} is forbidden: User "system:serviceaccount:'
                                                                     f'{ns}:nightshift-coordinator" cannot create resource '
                                                                     f'"{kind}" in API group "" in the namespace "{ns}"'))
                if kind in STATE["denied"]:  # as an admission webhook words it
                    return self._send(403, _status(403, "Forbidden", f'admission webhook "policy.example.com" denied the '
                                                                     f'request: {kind} is forbidden: User "x" cannot create '
                                                                     f'resource "gpus" past exceeded quota: team'))
                if kind in STATE["quota"]:
                    return self._send(403, _status(403, "Forbidden", f'{kind} "{key[2]}" is forbidden: exceeded quota: '
                                                                     f'{ns}-quota, requested: count/{kind}.batch=1'))
                if kind == "jobs" and "template" not in obj.get("spec", {}):
                    return self._send(422, _status(422, "Invalid", "Job.batch is invalid: spec.template: Required value"))
                if key in STATE["objects"]:
                    return self._send(409, _status(409, "AlreadyExists", f'{kind} "{key[2]}" already exists'))
                obj["status"] = {}
                obj["metadata"]["uid"] = str(uuid.uuid4())
                STATE["objects"][key] = obj
                _bump(obj, "ADDED")
                if kind in STATE["failing"]:  # made, but the answer lost to an error
                    return self._send(500, _status(500, "InternalError", "etcdserver: request timed out"))
                return self._send(201, obj)
            if method == "GET" and name is not None:
                obj = STATE["objects"].get((kind, ns, name))
                if obj is None:
                    return self._send(404, _status(404, "NotFound", f'{kind} "{name}" not found'))
                return self._send(200, obj)
            if method == "PATCH" and name is not None:
                if kind in STATE["forbidden_patch"]:
                    return self._send(403, _status(403, "Forbidden", f'{kind} "{name}" is forbidden: cannot patch'))
                if self.headers.get("Content-Type") != "application/merge-patch+json":
                    return self._send(415, _status(415, "UnsupportedMediaType",
                                                   "the body of the request was in an unknown format"))
                obj = STATE["objects"].get((kind, ns, name))
                if obj is None:
                    return self._send(404, _status(404, "NotFound", f'{kind} "{name}" not found'))
                _merge(obj, json.loads(body))
                _bump(obj, "MODIFIED")
                return self._send(200, obj)
            if method == "DELETE" and name is not None:
                if kind in STATE["forbidden_delete"]:
                    return self._send(403, _status(403, "Forbidden", f'{kind} "{name}" is forbidden: cannot delete'))
                obj = STATE["objects"].pop((kind, ns, name), None)
                if obj is None:
                    return self._send(404, _status(404, "NotFound", f'{kind} "{name}" not found'))
                _bump(obj, "DELETED")
                uid = obj["metadata"].get("uid")
                for key, other in list(STATE["objects"].items()):
                    if any(r.get("uid") == uid for r in other["metadata"].get("ownerReferences", [])):
                        _bump(STATE["objects"].pop(key), "DELETED")
                return self._send(200, _status(200, "", "deleted"))
            if method == "GET" and name is None and query.get("watch") in ("1", "true"):
                return self._watch(kind, ns, query)
            if method == "GET" and name is None:
                items = [o for (k, n, _), o in sorted(STATE["objects"].items()) if k == kind and n == ns]
                return self._send(200, {"kind": "JobList", "apiVersion": "batch/v1",
                                        "metadata": {"resourceVersion": str(STATE["rv"])}, "items": items})
        return self._send(405, _status(405, "MethodNotAllowed", method))

    def _watch(self, kind: str, ns: str, query: dict) -> None:  # LOCK held
        since = int(query.get("resourceVersion") or 0)
        if since < STATE["compacted"]:
            line = json.dumps({"type": "ERROR", "object": _status(410, "Expired", f"too old resource version: {since}")})
            return self._send(200, line + "\n")
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1)
        while True:
            events = [(rv, t, o) for rv, t, o in STATE["events"]
                      if rv > since and (o.get("metadata", {}).get("namespace", ns) == ns)
                      and ("template" in o.get("spec", {})) == (kind == "jobs")]
            left = deadline - time.monotonic()
            if events or left <= 0:
                break
            LOCK.wait(left)
        lines = [json.dumps({"type": t, "object": o}) for _, t, o in events]
        if query.get("allowWatchBookmarks") == "true":
            lines.append(json.dumps({"type": "BOOKMARK", "object": {
                "kind": "Job", "apiVersion": "batch/v1", "metadata": {"resourceVersion": str(STATE["rv"])}}}))
        self._send(200, "".join(line + "\n" for line in lines))

    def _test(self, method: str, parts: list, body: str) -> None:
        with LOCK:
            if parts[1] == "requests":
                return self._send(200, STATE["requests"])
            if parts[1] == "objects" and len(parts) == 5:
                obj = STATE["objects"].get((parts[2], parts[3], parts[4]))
                return self._send(200, obj) if obj is not None else self._send(404, _status(404, "NotFound", parts[4]))
            if parts[1] in ("forbid", "forbid-patch", "forbid-delete", "quota", "deny", "fail") and len(parts) == 3:
                key = {"forbid": "forbidden", "forbid-patch": "forbidden_patch", "forbid-delete": "forbidden_delete",
                       "quota": "quota", "deny": "denied", "fail": "failing"}
                STATE[key[parts[1]]].symmetric_difference_update({parts[2]})
                return self._send(200, {})
            if parts[1] == "compact":
                STATE["compacted"] = STATE["rv"] + 1
                STATE["events"].clear()
                return self._send(200, {})
            if parts[1] == "jobs" and len(parts) == 5 and parts[4] == "status":
                obj = STATE["objects"].get(("jobs", parts[2], parts[3]))
                if obj is None:
                    return self._send(404, _status(404, "NotFound", parts[3]))
                obj["status"] = json.loads(body)
                _bump(obj, "MODIFIED")
                return self._send(200, obj)
        return self._send(404, {})

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_DELETE(self) -> None:
        self._route("DELETE")

    def do_PATCH(self) -> None:
        self._route("PATCH")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tls", default="", help="serve https with DIR/server.crt and DIR/server.key")
    parser.add_argument("--token", action="append", default=[], help="a bearer token requests may carry")
    args = parser.parse_args()
    TOKENS.extend(args.token)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if args.tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.tls + "/server.crt", args.tls + "/server.key")
        server.socket = context.wrap_socket(server.socket, server_side=True)
    print(server.server_address[1], flush=True)
    # Ends with its parent (the test): stdin closes.
    threading.Thread(target=lambda: (sys.stdin.read(), server.shutdown()), daemon=True).start()
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())

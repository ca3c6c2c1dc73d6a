"""The user's lease in etcd, over its v3 JSON gateway (no client library: httpx).

Why etcd: its leases expire on the server by a ttl (a dead replica's lease goes without
it), and every change has a cluster-wide revision that only rises, so the revision at
which a lease key was created is a fencing token for free. The key is
``<prefix><user>``, its value the holder's name, attached to a lease of `ttl_s`; it is
created only when absent (a transaction comparing its create_revision with 0).
"""

from __future__ import annotations

import base64
from typing import Any

import httpx

from conductor.memory.lease import Held, Lease

PREFIX = "tandem/lease/"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


class EtcdLeases:
    """LeaseService over etcd's gateway at `url` (``http://host:2379``)."""

    def __init__(self, url: str, prefix: str = PREFIX, timeout_s: float = 2.0) -> None:
        self.url = url.rstrip("/")
        self.prefix = prefix
        self._http = httpx.Client(timeout=timeout_s)

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            answer = self._http.post(f"{self.url}/v3/{path}", json=body)
        except httpx.HTTPError as exc:  # the keeper's contract: OSError when unreachable
            raise ConnectionError(f"etcd at {self.url}: {type(exc).__name__}") from None
        if answer.status_code != 200:
            raise ConnectionError(f"etcd at {self.url}: HTTP {answer.status_code}")
        return answer.json()

    def acquire(self, user: str, holder: str, ttl_s: float) -> Lease | Held:
        granted = self._post("lease/grant", {"TTL": max(1, round(ttl_s))})
        lease_id = granted["ID"]
        key = _b64(self.prefix + user)
        txn = self._post("kv/txn", {
            "compare": [{"key": key, "target": "CREATE", "create_revision": "0"}],
            "success": [{"request_put": {"key": key, "value": _b64(holder),
                                         "lease": lease_id}}],
            "failure": [{"request_range": {"key": key}}]})
        if txn.get("succeeded"):
            return Lease(user, int(txn["header"]["revision"]), lease_id, ttl_s)
        self._post("lease/revoke", {"ID": lease_id})
        kvs = txn["responses"][0]["response_range"].get("kvs") or []
        if not kvs:  # gone between the compare and now: the next call takes it
            return Held("", 0.0)
        other = kvs[0]
        left = self._post("lease/timetolive", {"ID": other.get("lease", "0")})
        return Held(base64.b64decode(other.get("value", "")).decode(errors="replace"),
                    float(left.get("TTL", 0)))

    def renew(self, lease: Lease) -> bool:
        answer = self._post("lease/keepalive", {"ID": lease.lease_id})
        return int(answer.get("result", {}).get("TTL", 0)) > 0

    def release(self, lease: Lease) -> None:
        self._post("lease/revoke", {"ID": lease.lease_id})

    def revoke_holder(self, user: str, holder: str) -> bool:
        got = self._post("kv/range", {"key": _b64(self.prefix + user)})
        kvs = got.get("kvs") or []
        if not kvs or base64.b64decode(kvs[0].get("value", "")).decode() != holder:
            return False
        self._post("lease/revoke", {"ID": kvs[0].get("lease", "0")})
        return True

    def close(self) -> None:
        self._http.close()

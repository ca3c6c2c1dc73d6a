"""The replicas lane (`-m replicas`, make test): one cluster for the lane, etcd, two tiny
replicas and vllm-router, started here and stopped after (bench/replicas/cluster.py,
which the bench's soak over replicas starts too)."""

from __future__ import annotations

import pytest

from bench.replicas.cluster import Cluster, SetupError

USERS = [f"user{i:02d}" for i in range(50)]


@pytest.fixture(scope="session")
def cluster(tmp_path_factory) -> Cluster:
    lane = Cluster(tmp_path_factory.mktemp("replicas"))
    try:
        lane.start_etcd()
        lane.make_replicas()
        lane.keys = lane.add_keys(USERS)
        for node in lane.nodes:
            lane.start_replica(node)
            lane.wait_replica(node)
        lane.start_router()
    except SetupError as exc:
        lane.stop()
        pytest.skip(f"the replicas lane cannot run here: {exc}")
    except BaseException:
        lane.stop()
        raise
    yield lane
    lane.stop()

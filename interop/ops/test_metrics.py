"""rzk's /metrics read by Prometheus's own Python text parser (prometheus_client), with the
names ZooKeeper's documentation, its Grafana dashboard (grafana.com 10465) and Grafana's
ZooKeeper mixin query, and ZooKeeper's types for them."""

import os
import tempfile
import urllib.request
import uuid

import pytest
from kazoo.client import KazooClient
from prometheus_client.parser import text_string_to_metric_families

import tlsenv
import servers

# Names the dashboards query, with ZooKeeper's Prometheus types. quorum_size and the
# leader's gauges exist only in an ensemble (ZooKeeper registers them there too).
DASHBOARD = {
    "znode_count": "gauge",
    "approximate_data_size": "gauge",
    "num_alive_connections": "gauge",
    "outstanding_requests": "gauge",
    "watch_count": "gauge",
    "ephemerals_count": "gauge",
    "global_sessions": "gauge",
    "avg_latency": "gauge",
    "min_latency": "gauge",
    "max_latency": "gauge",
    "packets_received": "gauge",
    "packets_sent": "gauge",
    "open_file_descriptor_count": "gauge",
    "max_file_descriptor_count": "gauge",
    "uptime": "gauge",
    "readlatency": "summary",
    "updatelatency": "summary",
}


@pytest.fixture(scope="module")
def rzk():
    binary = os.environ.get("RZK_BIN")
    if not binary or not os.access(binary, os.X_OK):
        pytest.fail("RZK_BIN must name the rzk binary (45-ops.sh builds it)")
    work = tempfile.mkdtemp(prefix="rzk-metrics-")
    data_dir, port, cfg, log_path = servers._prepare("rzk-metrics", work)
    mport = servers.free_port()
    with open(cfg, "a") as f:
        f.write(
            "metricsProvider.className="
            "org.apache.zookeeper.metrics.prometheus.PrometheusMetricsProvider\n"
            f"metricsProvider.httpHost={servers.HOST}\nmetricsProvider.httpPort={mport}\n"
            "admin.enableServer=false\n"
        )
    s = servers.Server("rzk", [binary, cfg], None, data_dir, port, log_path, work).start()
    s.metrics_url = f"http://{servers.HOST}:{mport}/metrics"
    yield s
    s.stop()
    s.cleanup()


def scrape(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4"), r.headers
        return {f.name: f for f in text_string_to_metric_families(r.read().decode())}


def test_prometheus_parser_reads_zookeepers_names_and_types(rzk):
    c = KazooClient(hosts=rzk.hosts, timeout=10.0)
    c.start(timeout=20)
    try:
        base = f"/m-{uuid.uuid4().hex[:8]}"
        c.create(base, b"x")
        for i in range(10):
            c.create(f"{base}/n{i}", b"y" * 10)
            c.get(f"{base}/n{i}")
        c.create(f"{base}/eph", b"", ephemeral=True)
        c.get(base, watch=lambda e: None)
        families = scrape(rzk.metrics_url)
        for name, kind in DASHBOARD.items():
            assert name in families, f"{name} missing; have {sorted(families)}"
            assert families[name].type == kind, (name, families[name].type)
        value = {f.name: f.samples[0].value for f in families.values() if f.type == "gauge"}
        assert value["num_alive_connections"] == 1
        assert value["ephemerals_count"] == 1
        assert value["watch_count"] >= 1
        # / and /zookeeper (and /zookeeper/quota, /zookeeper/config) plus ours.
        assert value["znode_count"] >= 12
        read = {s.name + str(s.labels): s.value for s in families["readlatency"].samples}
        assert read["readlatency_count{}"] >= 10, read
        quantiles = sorted(s.labels["quantile"] for s in families["readlatency"].samples
                           if "quantile" in s.labels)
        assert quantiles == ["0.5", "0.9", "0.99"], quantiles
        updates = [s for s in families["updatelatency"].samples if s.name == "updatelatency_count"]
        assert updates[0].value >= 12
        assert any(n.startswith("rzk_") for n in families), sorted(families)
    finally:
        c.stop()
        c.close()

"""The read path's Prometheus metrics (LatentBox 4.3, 4.4), built at each scrape from the decode nodes'
heartbeat snapshots in Redis (jobs.read_routing) and their latest tuning decisions in Postgres (db.reads).
A node's event counts only grow while it runs (and start again at 0 with it): counters, which Prometheus'
rate() reads across such restarts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import redis
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from sqlalchemy.orm import Session

from db.reads import latest_tier_decisions
from jobs.read_routing import live_nodes, node_snapshots, queue_depths

READ_QUEUE: Final = "reprise_read_queue_depth"  # the decode pool's autoscaler reads it (deploy/kubernetes)
EVENTS = ("reads", "decodes", "promotions", "evictions", "spills_served", "write_backs")


def read_nodes_view(
    client: redis.Redis, session: Session, *, heartbeat_s: float
) -> dict[str, dict[str, Any]]:
    """Every live decode node: its snapshot, its queue depth and its latest tuning decision."""
    nodes = live_nodes(client, heartbeat_s=heartbeat_s)
    snapshots = node_snapshots(client, nodes)
    depths = queue_depths(client, nodes)
    decisions = latest_tier_decisions(session)
    return {
        node: {**snapshots.get(node, {}), "queue_depth": depths.get(node), "decision": decisions.get(node)}
        for node in nodes
    }


def read_families(view: Mapping[str, Mapping[str, Any]]) -> list[Metric]:
    """The read path's families from `read_nodes_view`: each live node's tiers, counts, queue and gradient."""
    nodes = GaugeMetricFamily("reprise_read_nodes", "Decode nodes alive in the hash ring.", value=len(view))
    alpha = GaugeMetricFamily(
        "reprise_read_alpha", "Each decode node's image-tier share alpha (LatentBox 4.3).", labels=["node"]
    )
    tier_bytes = GaugeMetricFamily(
        "reprise_read_tier_bytes",
        "Bytes held per decode node and tier (image, latent).",
        labels=["node", "tier"],
    )
    tier_hits = GaugeMetricFamily(
        "reprise_read_tier_hit_ratio",
        "Share of a node's reads answered by each tier since it started.",
        labels=["node", "tier"],
    )
    events = CounterMetricFamily(
        "reprise_read_node_events",
        "Per node since it started: reads, decodes, promotions, evictions, spills_served, write_backs.",
        labels=["node", "event"],
    )
    queue = GaugeMetricFamily(READ_QUEUE, "Reads waiting on each decode node's queue.", labels=["node"])
    gradient = GaugeMetricFamily(
        "reprise_read_gradient", "Eq. 2's D at each node's latest tuning window.", labels=["node"]
    )
    for node, figures in view.items():
        if "alpha" in figures:
            alpha.add_metric([node], figures["alpha"])
            tier_bytes.add_metric([node, "image"], figures["image_bytes"])
            tier_bytes.add_metric([node, "latent"], figures["latent_bytes"])
            for tier in ("image", "latent"):
                ratio = figures.get(f"{tier}_tier_hit")
                tier_hits.add_metric([node, tier], ratio if ratio is not None else float("nan"))
            for event in EVENTS:
                events.add_metric([node, event], figures.get(event, 0))
        if figures.get("queue_depth") is not None:
            queue.add_metric([node], figures["queue_depth"])
        if figures.get("decision"):
            gradient.add_metric([node], figures["decision"]["gradient"])
    return [nodes, alpha, tier_bytes, tier_hits, events, queue, gradient]

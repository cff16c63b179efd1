"""The read path's Prometheus gauges (LatentBox 4.3, 4.4), set at each scrape from the decode nodes' heartbeat
snapshots in Redis (jobs.read_routing) and their latest tuning decisions in Postgres (db.reads)."""

from __future__ import annotations

from typing import Any, Final

import redis
from prometheus_client import Gauge
from sqlalchemy.orm import Session

from db.reads import latest_tier_decisions
from jobs.read_routing import live_nodes, node_snapshots, queue_depths

LATEST: Final = "mostrecent"  # in multiprocess mode, the value the last scrape's process set

READ_NODES = Gauge("reprise_read_nodes", "Decode nodes alive in the hash ring.", multiprocess_mode=LATEST)
READ_ALPHA = Gauge(
    "reprise_read_alpha", "Each decode node's image-tier share alpha (LatentBox 4.3).", ["node"],
    multiprocess_mode=LATEST,
)  # fmt: skip
READ_TIER_BYTES = Gauge(
    "reprise_read_tier_bytes", "Bytes held per decode node and tier (image, latent).", ["node", "tier"],
    multiprocess_mode=LATEST,
)  # fmt: skip
READ_TIER_HITS = Gauge(
    "reprise_read_tier_hit_ratio", "Share of a node's reads answered by each tier since it started.",
    ["node", "tier"], multiprocess_mode=LATEST,
)  # fmt: skip
READ_COUNTS = Gauge(
    "reprise_read_node_events", "Per node since it started: reads, decodes, promotions, evictions, "
    "spills_served, write_backs.", ["node", "event"], multiprocess_mode=LATEST,
)  # fmt: skip
READ_QUEUE = Gauge(
    "reprise_read_queue_depth",
    "Reads waiting on each decode node's queue.",
    ["node"],
    multiprocess_mode=LATEST,
)
READ_GRADIENT = Gauge(
    "reprise_read_gradient",
    "Eq. 2's D at each node's latest tuning window.",
    ["node"],
    multiprocess_mode=LATEST,
)
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


def refresh_read_gauges(client: redis.Redis, session: Session, *, heartbeat_s: float) -> None:
    view = read_nodes_view(client, session, heartbeat_s=heartbeat_s)
    READ_NODES.set(len(view))
    for node, figures in view.items():
        if "alpha" in figures:
            READ_ALPHA.labels(node=node).set(figures["alpha"])
            READ_TIER_BYTES.labels(node=node, tier="image").set(figures["image_bytes"])
            READ_TIER_BYTES.labels(node=node, tier="latent").set(figures["latent_bytes"])
            for tier in ("image", "latent"):
                ratio = figures.get(f"{tier}_tier_hit")
                READ_TIER_HITS.labels(node=node, tier=tier).set(ratio if ratio is not None else float("nan"))
            for event in EVENTS:
                READ_COUNTS.labels(node=node, event=event).set(figures.get(event, 0))
        if figures.get("queue_depth") is not None:
            READ_QUEUE.labels(node=node).set(figures["queue_depth"])
        if figures.get("decision"):
            READ_GRADIENT.labels(node=node).set(figures["decision"]["gradient"])

"""Reads and decode: LatentBox's read path: decode nodes that turn stored latents into images when a
client reads one, their dual-format cache (images and latents, split by a tuned alpha), routing and
spilling between nodes, and how an image is delivered."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings

from core.vocabulary import ImageDelivery, ReadStore, Tiering


class ReadSettings(BaseSettings):
    """Reads and decode (LatentBox): decode nodes, their image and latent tiers, routing and delivery.

    Defaults follow LatentBox (sections 4.2 to 6.5), scaled to a node that sees far fewer reads.
    """

    decode_wait_s: float = Field(
        10.0, gt=0, description="How long an image read waits on the decode nodes; then 202, Retry-After."
    )
    read_cache_bytes: int = Field(
        256 * 2**20,
        ge=0,
        description="Each decode node's cache budget C, shared by its image and latent tiers "
        "(LatentBox 4.2). The paper gives each node 2 GB, 1% of the stored objects' PNG footprint "
        "(6.1); size it so.",
    )
    read_tiering: Tiering = Field(
        Tiering.ADAPTIVE,
        description="adaptive: marginal-hit tuning moves alpha every window (LatentBox 4.3); fixed: "
        "alpha stays.",
    )
    read_alpha: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="The image tier's share of the budget: fixed, or the tuner's start. 0.5 is the best "
        "static split on the paper's trace (6.5.2). 1: images only; 0: latents only.",
    )
    read_window: int = Field(
        1000,
        ge=1,
        description="Reads per tuning window W. The paper's 1 M suits 2 B reads; 6.5.4 finds small windows "
        "cost little (10 K: 3%). A node sees far fewer reads, so 1,000.",
    )
    read_step: float = Field(0.005, gt=0, le=1, description="alpha's step per window (LatentBox 6.5: 0.005).")
    read_tail: float = Field(
        0.10, ge=0, lt=1, description="Each tier's tail fraction tau, whose hits are marginal (6.5: 0.10)."
    )
    read_promote_after: int = Field(
        8,
        ge=0,
        description="Latent hits before an object is promoted to the image tier, h (6.5.4: 8 is best).",
    )
    read_spill_theta: int = Field(
        4,
        ge=0,
        description="An owner's queue deeper than this spills the decode to the least-loaded node (6.5.3).",
    )
    read_store: ReadStore = Field(
        ReadStore.LATENTS,
        description="latents: the durable store keeps latents and images are a cache (LatentBox); images: "
        "every decoded image is also stored for good (an image store, the paper's ImgStore baseline).",
    )
    read_nodes: int = Field(
        1, ge=1, le=16, description="Decode nodes `reprise run` starts (LatentBox's testbed has three, 6.1)."
    )
    read_heartbeat_s: float = Field(
        2.0,
        gt=0,
        description="How often a decode node says it is alive; three missed beats and it leaves the ring.",
    )
    image_delivery: ImageDelivery = Field(
        ImageDelivery.BYTES,
        description="bytes, or redirect: a stored image is answered with a 307 to a presigned URL (S3 only).",
    )
    presign_ttl_s: int = Field(300, ge=1, le=7 * 86400, description="Lifetime of a presigned image URL.")

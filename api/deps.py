"""Dependencies of the routes, as Annotated aliases. What a route needs from outside comes from the
AppState that create_app builds, so tests hand in their own settings, broker and image reader."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Annotated

import redis
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials
from redis.exceptions import RedisError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api.auth import Caller, CallerCache, bearer_scheme, caller_for_credentials, counted_caller
from api.client_address import client_address
from api.feeds import JobFeeds
from api.rate_limit import AddressLimit, RateLimiter, rate_limited
from api.reads import ImageReader
from api.revocations import RevocationListener
from api.waiting import JobWaiter
from core.params import Limits
from core.settings import Settings
from db.blobs.base import BlobStore
from db.engine import engine_for
from db.models import Tenant
from jobs.broker import async_broker_client, broker_client
from jobs.dispatch import CeleryDispatcher, Dispatcher
from jobs.webhooks import Resolver, system_resolver

BROKER_TIMEOUT_S = 1.0  # the API asks Redis only cheap questions (LLEN, PING): fail fast when it is down


@dataclass
class AppState:
    """Everything the routes reach outside the process. Absent parts are built on first use."""

    settings: Settings
    dispatcher_: Dispatcher | None = None
    blob_store_: BlobStore | None = None
    reader: ImageReader | None = None  # wired by the serving command to the decode nodes (api.reads)
    resolver: Resolver = system_resolver
    redis_: redis.Redis | None = field(default=None, repr=False)
    callers: CallerCache = field(default_factory=CallerCache, repr=False)
    waiter_: JobWaiter | None = field(default=None, repr=False)
    rate_limiter_: RateLimiter | None = field(default=None, repr=False)
    address_limiter_: RateLimiter | None = field(default=None, repr=False)
    feeds_: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, JobFeeds] = field(
        default_factory=weakref.WeakKeyDictionary, repr=False
    )
    revocations_: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, RevocationListener] = field(
        default_factory=weakref.WeakKeyDictionary, repr=False
    )

    @property
    def waiter(self) -> JobWaiter:
        """Holds `Prefer: wait` requests until their job ends (api.waiting)."""
        if self.waiter_ is None:
            self.waiter_ = JobWaiter(self.settings)
        return self.waiter_

    @property
    def feeds(self) -> JobFeeds:
        """The event streams' shared readers of this event loop's followed jobs (api.feeds)."""
        loop = asyncio.get_running_loop()
        found = self.feeds_.get(loop)
        if found is None:
            found = self.feeds_[loop] = JobFeeds(self.waiter)
        return found

    @property
    def revocations(self) -> RevocationListener:
        """This event loop's subscription to revoked keys (api.revocations)."""
        loop = asyncio.get_running_loop()
        found = self.revocations_.get(loop)
        if found is None:
            found = self.revocations_[loop] = RevocationListener(
                async_broker_client(self.settings), self.callers
            )
        return found

    @property
    def dispatcher(self) -> Dispatcher:
        if self.dispatcher_ is None:
            self.dispatcher_ = CeleryDispatcher.for_settings(self.settings)
        return self.dispatcher_

    @property
    def blob_store(self) -> BlobStore:
        if self.blob_store_ is None:
            from db.blobs.factory import blob_store_from_settings

            self.blob_store_ = blob_store_from_settings(self.settings)
        return self.blob_store_

    @property
    def redis(self) -> redis.Redis:
        if self.redis_ is None:
            self.redis_ = broker_client(
                self.settings,
                socket_timeout=BROKER_TIMEOUT_S,
                socket_connect_timeout=BROKER_TIMEOUT_S,
            )
        return self.redis_

    @property
    def rate_limiter(self) -> RateLimiter:
        """The tenants' request-rate buckets, in the broker's Redis (api.rate_limit)."""
        if self.rate_limiter_ is None:
            s = self.settings
            self.rate_limiter_ = RateLimiter(self.redis, per_s=s.rate_limit_per_s, burst=s.rate_limit_burst)
        return self.rate_limiter_

    @property
    def address_limiter(self) -> RateLimiter:
        """The client addresses' buckets for requests without a valid key, in the same Redis."""
        if self.address_limiter_ is None:
            s = self.settings
            self.address_limiter_ = RateLimiter(
                self.redis, per_s=s.anonymous_rate_limit_per_s, burst=s.anonymous_rate_limit_burst
            )
        return self.address_limiter_

    @property
    def limits(self) -> Limits:
        s = self.settings
        return Limits(max_prompt_chars=s.max_prompt_chars, max_steps=s.max_steps, max_side=s.max_side)


def get_state(request: Request) -> AppState:
    state = request.app.state.reprise
    assert isinstance(state, AppState)
    return state


StateDep = Annotated[AppState, Depends(get_state)]


async def get_session(state: StateDep) -> AsyncIterator[Session]:
    """A session per request. Routes commit what they change; anything uncommitted is rolled back.

    Closed on the event loop, not in a worker thread: a sync route's connection goes back to the pool
    as soon as it is done, without first waiting for a free thread (which, under a burst, are all
    waiting for a connection)."""
    session = Session(engine_for(state.settings.sqlalchemy_url), expire_on_commit=False)
    try:
        yield session
    finally:
        session.close()


SessionDep = Annotated[Session, Depends(get_session)]


def base_url(request: Request, state: StateDep) -> str:
    """Where clients reach us: REPRISE_PUBLIC_BASE_URL, else the request's own base URL."""
    return state.settings.public_base_url or str(request.base_url).rstrip("/")


BaseUrlDep = Annotated[str, Depends(base_url)]
BearerDep = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)]


def get_address(request: Request, state: StateDep) -> AddressLimit:
    """The request's client address (api.client_address) and its bucket for requests without a valid key."""
    return AddressLimit(state.address_limiter, client_address(request, state.settings.trusted_proxies))


AddressDep = Annotated[AddressLimit, Depends(get_address)]


async def limit_address(address: AddressDep) -> None:
    """429 with Retry-After once the client address has spent its rate of requests without a key: a
    dependency of the routes that take none (signed output links)."""
    await run_in_threadpool(address.charge)


def get_caller(
    credentials: HTTPAuthorizationCredentials | None,
    state: AppState,
    session: Session,
    address: AddressLimit | None = None,
) -> Caller:
    """The tenant whose API key the request carries, and the key's role; 401 otherwise, counted against
    the client's address when given (429 once it has spent its rate: api.auth.counted_caller). A
    `Prefer: wait` reload gives none: it is no new request.

    The lookup's transaction ends at once: a sync route runs its dependencies and its body in two trips
    through the thread pool, and a connection held between them can starve the pool under a burst."""

    def load() -> Caller:
        try:
            if address is None:
                return caller_for_credentials(session=session, credentials=credentials)
            return counted_caller(session=session, credentials=credentials, address=address)
        finally:
            session.commit()

    return state.callers.lookup(credentials, load, ttl_s=state.settings.auth_cache_s)


def request_caller(
    credentials: BearerDep, state: StateDep, session: SessionDep, address: AddressDep
) -> Caller:
    """get_caller for the request's own key, its failures counted against its address."""
    return get_caller(credentials, state, session, address)


CallerDep = Annotated[Caller, Depends(request_caller)]


def get_tenant(caller: CallerDep) -> Tenant:
    """The tenant whose API key the request carries; 401 otherwise."""
    return caller.tenant


TenantDep = Annotated[Tenant, Depends(get_tenant)]


async def hear_revocations(state: StateDep) -> None:
    """Before a keyed route looks its key up: this loop's subscription to revoked keys is in place, so
    that a key this process trusts from its cache is one whose revocation it hears (api.revocations)."""
    try:
        listener = state.revocations
    except RedisError:
        return  # no broker: the key cache's own life bounds how long a revoked key works
    await listener.subscribed()


async def limit_rate(caller: CallerDep, state: StateDep) -> None:
    """429 with Retry-After once the caller's tenant has spent its request rate (api.rate_limit); admin
    keys are not limited. A dependency of every route that takes an API key, run once per request (a
    `Prefer: wait` reload looks the key up again, but is no new request)."""
    limiter = state.rate_limiter
    if caller.admin or not limiter.enabled:
        return
    verdict = await run_in_threadpool(limiter.take, caller.tenant.id)
    if not verdict.allowed:
        raise rate_limited(limiter, verdict, source="this tenant")

"""The cache index on the real Postgres + pgvector: scoped lookups in both modes, use counters, and the
guarded reads that turn an evicted source into SourceVanished."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from sqlalchemy import delete, func, select, update

from core.errors import SourceVanished
from core.scopes import SHARED_SCOPE, lookup_scopes, tenant_scope
from core.settings import Settings
from core.usage import INSERTION_USES
from core.vocabulary import EntryState, LookupMode
from db import cache
from db.blobs import keys
from db.blobs.local import LocalBlobStore
from db.engine import session_scope
from db.models import CacheEntry, CacheState

pytestmark = pytest.mark.integration

Vector = npt.NDArray[np.float32]
TEXT = LookupMode.TEXT_TO_TEXT
IMAGE = LookupMode.TEXT_TO_IMAGE


def unit(rng: np.random.Generator, dim: int) -> Vector:
    v = rng.normal(size=dim)
    return np.asarray(v / float(np.linalg.norm(v)), dtype=np.float32)


def towards(a: Vector, b: Vector, t: float) -> Vector:
    v = (1 - t) * a + t * b
    return np.asarray(v / float(np.linalg.norm(v)), dtype=np.float32)


def insert(
    settings: Settings,
    *,
    scope: str,
    family: str,
    text: Vector,
    image: Vector | None = None,
    ks: Sequence[int] = (5, 10, 15, 20, 25),
    size: tuple[int, int] = (512, 512),
) -> uuid.UUID:
    entry_id = uuid.uuid4()
    with session_scope(settings) as session:
        cache.insert_entry(
            session,
            entry_id=entry_id,
            scope=scope,
            model_family=family,
            prompt="a prompt",
            text_embedding=text,
            image_embedding=image,
            final_latent_key=keys.final_latent_key(entry_id),
            final_bytes=1000,
            steps=50,
            states=[cache.NewState(k, keys.state_key(entry_id, k), 100) for k in ks],
            size=size,
        )
    return entry_id


def lookup(
    settings: Settings, query: Vector, scopes: Sequence[str], family: str | None, mode: LookupMode = TEXT
) -> cache.LookupResult | None:
    with session_scope(settings) as session:
        return cache.lookup(
            session, query_embedding=query, mode=mode, scopes=scopes, model_family=family, ef_search=40
        )


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20260101)


@pytest.fixture
def family() -> str:
    return f"fam-{uuid.uuid4().hex[:8]}"


def test_a_tenant_never_sees_another_tenants_entries(
    db_settings: Settings, rng: np.random.Generator, family: str
) -> None:
    dim = db_settings.text_embedding_dim
    a, b = uuid.uuid4(), uuid.uuid4()
    query = unit(rng, dim)
    b_entry = insert(db_settings, scope=tenant_scope(b), family=family, text=query)  # identical to the query
    a_entry = insert(
        db_settings, scope=tenant_scope(a), family=family, text=towards(query, unit(rng, dim), 0.5)
    )

    found_a = lookup(db_settings, query, lookup_scopes(a, shared_cache=False), family)
    assert found_a is not None and found_a.entry_id == a_entry and found_a.similarity < 0.99
    found_b = lookup(db_settings, query, lookup_scopes(b, shared_cache=True), family)
    assert found_b is not None and found_b.entry_id == b_entry
    assert found_b.similarity == pytest.approx(1.0, abs=1e-5)
    assert lookup(db_settings, query, lookup_scopes(uuid.uuid4(), shared_cache=False), family) is None


def test_shared_scope_only_when_opted_in(
    db_settings: Settings, rng: np.random.Generator, family: str
) -> None:
    dim = db_settings.text_embedding_dim
    tenant = uuid.uuid4()
    query = unit(rng, dim)
    own = insert(
        db_settings, scope=tenant_scope(tenant), family=family, text=towards(query, unit(rng, dim), 0.6)
    )
    shared = insert(db_settings, scope=SHARED_SCOPE, family=family, text=towards(query, unit(rng, dim), 0.1))

    without = lookup(db_settings, query, lookup_scopes(tenant, shared_cache=False), family)
    assert without is not None and without.entry_id == own
    with_shared = lookup(db_settings, query, lookup_scopes(tenant, shared_cache=True), family)
    assert with_shared is not None and with_shared.entry_id == shared and with_shared.scope == SHARED_SCOPE
    assert lookup(db_settings, query, (), family) is None


def test_lookup_filters_by_model_family(db_settings: Settings, rng: np.random.Generator, family: str) -> None:
    dim = db_settings.text_embedding_dim
    scope = tenant_scope(uuid.uuid4())
    query = unit(rng, dim)
    other_family = family + "-xl"
    exact_other = insert(db_settings, scope=scope, family=other_family, text=query)
    mine = insert(db_settings, scope=scope, family=family, text=towards(query, unit(rng, dim), 0.4))

    found = lookup(db_settings, query, (scope,), family)
    assert found is not None and found.entry_id == mine and found.model_family == family
    any_family = lookup(db_settings, query, (scope,), None)
    assert any_family is not None and any_family.entry_id == exact_other


def test_lookup_filters_by_size(db_settings: Settings, rng: np.random.Generator, family: str) -> None:
    dim = db_settings.text_embedding_dim
    scope = tenant_scope(uuid.uuid4())
    query = unit(rng, dim)
    exact_but_large = insert(db_settings, scope=scope, family=family, text=query, size=(512, 512))
    small = insert(
        db_settings, scope=scope, family=family, text=towards(query, unit(rng, dim), 0.4), size=(64, 64)
    )
    with session_scope(db_settings) as session:
        found = cache.lookup(
            session,
            query_embedding=query,
            mode=TEXT,
            scopes=(scope,),
            model_family=family,
            ef_search=40,
            size=(64, 64),
        )
    assert found is not None and found.entry_id == small
    assert (unsized := lookup(db_settings, query, (scope,), family)) is not None
    assert unsized.entry_id == exact_but_large


def test_similarity_is_one_minus_cosine_distance_and_ks_are_listed(
    db_settings: Settings, rng: np.random.Generator, family: str
) -> None:
    dim = db_settings.text_embedding_dim
    scope = tenant_scope(uuid.uuid4())
    stored = unit(rng, dim) * 3.0  # not normalised: cosine does not care
    query = towards(stored / 3.0, unit(rng, dim), 0.3)
    entry_id = insert(db_settings, scope=scope, family=family, text=stored.astype(np.float32), ks=(25, 5, 15))
    found = lookup(db_settings, query, (scope,), family)
    assert found is not None and found.entry_id == entry_id
    expected = float(np.dot(stored, query) / (np.linalg.norm(stored) * np.linalg.norm(query)))
    assert found.similarity == pytest.approx(expected, abs=1e-5)
    assert found.stored_ks == (5, 15, 25)
    assert found.final_latent_key == keys.final_latent_key(entry_id)


def test_image_mode_searches_image_embeddings(
    db_settings: Settings, rng: np.random.Generator, family: str
) -> None:
    text_dim, image_dim = db_settings.text_embedding_dim, db_settings.image_embedding_dim
    scope = tenant_scope(uuid.uuid4())
    query = unit(rng, image_dim)
    no_image = insert(db_settings, scope=scope, family=family, text=unit(rng, text_dim), image=None)
    near_image = insert(
        db_settings,
        scope=scope,
        family=family,
        text=unit(rng, text_dim),
        image=towards(query, unit(rng, image_dim), 0.2),
    )
    insert(db_settings, scope=scope, family=family, text=unit(rng, text_dim), image=unit(rng, image_dim))
    found = lookup(db_settings, query, (scope,), family, mode=IMAGE)
    assert found is not None and found.entry_id == near_image != no_image
    with pytest.raises(Exception):  # noqa: B017 - a text-sized query against the image column is a DB error
        lookup(db_settings, unit(rng, text_dim), (scope,), family, mode=IMAGE)


def test_dirty_entries_are_invisible(db_settings: Settings, rng: np.random.Generator, family: str) -> None:
    dim = db_settings.text_embedding_dim
    scope = tenant_scope(uuid.uuid4())
    query = unit(rng, dim)
    best = insert(db_settings, scope=scope, family=family, text=query)
    second = insert(db_settings, scope=scope, family=family, text=towards(query, unit(rng, dim), 0.5))
    with session_scope(db_settings) as session:
        session.execute(update(CacheEntry).where(CacheEntry.id == best).values(state=EntryState.DIRTY.value))
    found = lookup(db_settings, query, (scope,), family)
    assert found is not None and found.entry_id == second


def test_hnsw_lookup_agrees_with_the_exact_scan_in_a_small_scope_of_a_big_table(
    db_settings: Settings, rng: np.random.Generator, family: str
) -> None:
    """The scope filter is applied while walking the index (iterative scan): a scope of 3 entries among
    hundreds of others still finds its own nearest entry."""
    dim = db_settings.text_embedding_dim
    crowd = tenant_scope(uuid.uuid4())
    mine = tenant_scope(uuid.uuid4())
    query = unit(rng, dim)
    with session_scope(db_settings) as session:
        for _ in range(400):
            cache.insert_entry(
                session,
                entry_id=uuid.uuid4(),
                scope=crowd,
                model_family=family,
                prompt="crowd",
                text_embedding=towards(query, unit(rng, dim), 0.3),  # all closer to the query than mine
                image_embedding=None,
                final_latent_key=None,
                final_bytes=0,
                steps=50,
                states=[],
            )
    targets = [
        insert(db_settings, scope=mine, family=family, text=towards(query, unit(rng, dim), t))
        for t in (0.7, 0.6, 0.8)
    ]
    with session_scope(db_settings) as session:
        # Make the planner walk the HNSW index (no sort of the scope's rows), with a short candidate list.
        session.execute(select(func.set_config("enable_sort", "off", True)))
        found = cache.lookup(
            session, query_embedding=query, mode=TEXT, scopes=(mine,), model_family=family, ef_search=10
        )
        # Control: the same walk without the iterative scan returns the 10 crowd entries, all filtered out.
        session.execute(select(func.set_config("hnsw.iterative_scan", "off", True)))
        plain = cache._nearest(session, query_embedding=query, mode=TEXT, scopes=(mine,), model_family=family)
    with session_scope(db_settings) as session:
        exact = cache.lookup_exact(
            session, query_embedding=query, mode=TEXT, scopes=(mine,), model_family=family
        )
    assert plain is None
    assert found is not None and exact is not None
    assert found.entry_id == exact.entry_id == targets[1]
    assert found.similarity == pytest.approx(exact.similarity, abs=1e-6)


def test_ef_search_out_of_range_is_refused(db_settings: Settings, rng: np.random.Generator) -> None:
    with session_scope(db_settings) as session, pytest.raises(ValueError, match="ef_search"):
        cache.lookup(
            session,
            query_embedding=unit(rng, db_settings.text_embedding_dim),
            mode=TEXT,
            scopes=("shared",),
            model_family=None,
            ef_search=0,
        )


def test_record_use_counts_entry_and_state(
    db_settings: Settings, rng: np.random.Generator, family: str
) -> None:
    scope = tenant_scope(uuid.uuid4())
    entry_id = insert(db_settings, scope=scope, family=family, text=unit(rng, db_settings.text_embedding_dim))
    with session_scope(db_settings) as session:
        before = session.scalar(select(CacheEntry.last_access_at).where(CacheEntry.id == entry_id))
    with session_scope(db_settings) as session:
        assert cache.record_use(session, entry_id=entry_id, k=15)
    with session_scope(db_settings) as session:
        assert cache.record_use(session, entry_id=entry_id, k=15)
        assert cache.record_use(session, entry_id=entry_id, k=None)
    with session_scope(db_settings) as session:
        entry = session.get_one(CacheEntry, entry_id)
        assert before is not None
        assert entry.access_count == INSERTION_USES + 3 and entry.last_access_at > before
        rows = session.execute(
            select(CacheState.k, CacheState.access_count).where(CacheState.entry_id == entry_id)
        )
        counts = {k: n for k, n in rows}
        first = INSERTION_USES  # a new state counts its own generation
        assert counts == {5: first, 10: first, 15: first + 2, 20: first, 25: first}
        assert not cache.record_use(session, entry_id=uuid.uuid4(), k=5)
        session.execute(
            update(CacheEntry).where(CacheEntry.id == entry_id).values(state=EntryState.DIRTY.value)
        )
        assert not cache.record_use(session, entry_id=entry_id, k=5)


def test_reads_of_an_evicted_source_raise_source_vanished(
    db_settings: Settings, rng: np.random.Generator, family: str, tmp_path: Path
) -> None:
    blobs = LocalBlobStore(tmp_path)
    scope = tenant_scope(uuid.uuid4())
    entry_id = insert(
        db_settings, scope=scope, family=family, text=unit(rng, db_settings.text_embedding_dim), ks=(5, 10)
    )
    blobs.put(keys.state_key(entry_id, 5), b"k5")
    blobs.put(keys.final_latent_key(entry_id), b"final")
    with session_scope(db_settings) as session:
        assert cache.read_state_blob(session, blobs, entry_id=entry_id, k=5) == b"k5"
        assert cache.read_final_latent(session, blobs, entry_id=entry_id) == b"final"
        assert cache.get_state(session, entry_id=entry_id, k=5).blob_key == keys.state_key(entry_id, 5)
        # a hole: no row at k=15
        with pytest.raises(SourceVanished):
            cache.get_state(session, entry_id=entry_id, k=15)
        # a row whose blob eviction already deleted
        with pytest.raises(SourceVanished):
            cache.read_state_blob(session, blobs, entry_id=entry_id, k=10)
    with session_scope(db_settings) as session:
        session.execute(delete(CacheState).where(CacheState.entry_id == entry_id, CacheState.k == 5))
    with session_scope(db_settings) as session, pytest.raises(SourceVanished):
        cache.read_state_blob(session, blobs, entry_id=entry_id, k=5)
    with session_scope(db_settings) as session:
        session.execute(
            update(CacheEntry).where(CacheEntry.id == entry_id).values(state=EntryState.DIRTY.value)
        )
    with session_scope(db_settings) as session:
        with pytest.raises(SourceVanished):
            cache.read_final_latent(session, blobs, entry_id=entry_id)
        with pytest.raises(SourceVanished):
            cache.get_state(session, entry_id=entry_id, k=10)
        with pytest.raises(SourceVanished):
            cache.get_live_entry(session, entry_id=uuid.uuid4())


def test_insert_refuses_bad_states(db_settings: Settings, rng: np.random.Generator, family: str) -> None:
    with pytest.raises(ValueError, match="repeat"):
        insert(
            db_settings,
            scope="shared",
            family=family,
            text=unit(rng, db_settings.text_embedding_dim),
            ks=(5, 5),
        )
    with pytest.raises(ValueError, match=r"in 1\.\.49"):
        insert(
            db_settings,
            scope="shared",
            family=family,
            text=unit(rng, db_settings.text_embedding_dim),
            ks=(50,),
        )


def test_a_small_scope_is_searched_exactly_and_a_large_one_through_the_index(
    db_settings: Settings, rng: np.random.Generator, family: str
) -> None:
    """The small-scope exact path: a scope at or under exact_max live entries never walks the HNSW index
    (where max_scan_tuples may run out before reaching its rows), and finds the true nearest entry."""
    dim = db_settings.text_embedding_dim
    small, large = tenant_scope(uuid.uuid4()), tenant_scope(uuid.uuid4())
    query = unit(rng, dim)
    for _ in range(6):
        insert(db_settings, scope=large, family=family, text=unit(rng, dim), ks=())
    mine = [
        insert(db_settings, scope=small, family=family, text=towards(query, unit(rng, dim), t))
        for t in (0.5, 0.3)
    ]
    with session_scope(db_settings) as session:
        assert cache.scope_size_at_most(session, (small,), 2)
        assert not cache.scope_size_at_most(session, (small,), 1)
        assert not cache.scope_size_at_most(session, (small, large), 7)
        found = cache.lookup(
            session,
            query_embedding=query,
            mode=TEXT,
            scopes=(small,),
            model_family=family,
            ef_search=40,
            exact_max=5,
        )
        walked = cache.lookup(
            session,
            query_embedding=query,
            mode=TEXT,
            scopes=(large,),
            model_family=family,
            ef_search=40,
            exact_max=5,
        )
        always_index = cache.lookup(
            session,
            query_embedding=query,
            mode=TEXT,
            scopes=(small,),
            model_family=family,
            ef_search=40,
            exact_max=0,
        )
    assert found is not None and found.path == cache.LookupPath.EXACT and found.entry_id == mine[1]
    assert walked is not None and walked.path == cache.LookupPath.INDEX
    assert always_index is not None and always_index.path == cache.LookupPath.INDEX
    assert always_index.entry_id == mine[1]


def test_the_prompt_key_finds_the_identical_requests_entry_only(
    db_settings: Settings, rng: np.random.Generator, family: str
) -> None:
    scope = tenant_scope(uuid.uuid4())
    entry_id = uuid.uuid4()
    with session_scope(db_settings) as session:
        cache.insert_entry(
            session,
            entry_id=entry_id,
            scope=scope,
            model_family=family,
            prompt="a fox",
            text_embedding=unit(rng, db_settings.text_embedding_dim),
            image_embedding=None,
            final_latent_key="k",
            final_bytes=1,
            steps=50,
            states=[cache.NewState(20, "s", 1)],
            size=(64, 64),
            prompt_key="f" * 64,
        )

    def by_key(key: str, scopes: Sequence[str], size: tuple[int, int]) -> cache.LookupResult | None:
        with session_scope(db_settings) as session:
            return cache.lookup_prompt(session, prompt_key=key, scopes=scopes, model_family=family, size=size)

    found = by_key("f" * 64, (scope,), (64, 64))
    assert found is not None and (found.entry_id, found.similarity, found.stored_ks) == (entry_id, 1.0, (20,))
    assert found.path == cache.LookupPath.PROMPT
    assert by_key("e" * 64, (scope,), (64, 64)) is None  # another request
    assert by_key("f" * 64, (tenant_scope(uuid.uuid4()),), (64, 64)) is None  # another tenant
    assert by_key("f" * 64, (scope,), (128, 128)) is None  # another size

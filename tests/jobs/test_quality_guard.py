"""The quality guard's controller: it tightens a row whose lowest bin drops more than the target,
loosens it again only well under the target, holds below the minimum sample and never leaves the
configured table's bounds."""

from __future__ import annotations

import math

import pytest

from jobs.policies.k_selection import NIRVANA_T2T, ThresholdTable, parse_table
from jobs.policies.quality_guard import (
    BIN_WIDTH,
    WINDOW,
    Audit,
    GuardConfig,
    adjust,
    bin_of,
    estimate,
)

CONFIG = GuardConfig(target=0.02, hysteresis=0.01, min_sample=4)
SERVED = {row.k: row.k for row in NIRVANA_T2T.rows}


def _audits(similarity: float, k: int, drop: float, n: int = 4) -> list[Audit]:
    return [Audit(similarity, k, drop) for _ in range(n)]


def _step(current: ThresholdTable, audits: list[Audit], base: ThresholdTable = NIRVANA_T2T) -> ThresholdTable:
    return adjust(current, base, estimate(audits), SERVED, CONFIG).table


def test_a_row_whose_lowest_bin_drops_too_much_is_tightened_past_every_bin_known_to() -> None:
    # The 0.65:5 row's hits at 0.66 and 0.68 lose 0.2; at 0.70 they are fine.
    audits = _audits(0.66, 5, 0.2) + _audits(0.68, 5, 0.15) + _audits(0.71, 5, 0.0)
    decision = adjust(NIRVANA_T2T, NIRVANA_T2T, estimate(audits), SERVED, CONFIG)
    assert decision.changed
    [change] = decision.changes
    assert (change.k, change.old, change.reason, change.n) == (5, 0.65, "tighten", 4)
    assert change.new == pytest.approx(0.70)
    assert decision.table.rows[-1].similarity == pytest.approx(0.70)
    assert decision.table.rows[:-1] == NIRVANA_T2T.rows[:-1]  # other rows untouched


def test_below_the_minimum_sample_or_within_the_target_nothing_moves() -> None:
    few = _audits(0.66, 5, 0.5, n=3) + _audits(0.70, 5, 0.5, n=3)  # alone nor pooled reach 4 for k 5
    few = few[:3]
    assert not adjust(NIRVANA_T2T, NIRVANA_T2T, estimate(few), SERVED, CONFIG).changed
    fine = _audits(0.66, 5, 0.02)
    assert not adjust(NIRVANA_T2T, NIRVANA_T2T, estimate(fine), SERVED, CONFIG).changed
    other_k = _audits(0.66, 10, 0.5)  # a k no row at that similarity serves
    assert not adjust(NIRVANA_T2T, NIRVANA_T2T, estimate(other_k), SERVED, CONFIG).changed


def test_a_tightened_row_loosens_only_well_under_the_target_and_never_below_the_configured_table() -> None:
    tightened = _step(NIRVANA_T2T, _audits(0.66, 5, 0.3))
    assert tightened.rows[-1].similarity == pytest.approx(0.675)
    # Under the target but within the hysteresis: it stays.
    assert _step(tightened, _audits(0.68, 5, 0.015)).rows[-1].similarity == pytest.approx(0.675)
    # The bin it would admit again is known to be bad: it stays.
    assert _step(tightened, _audits(0.68, 5, 0.0) + _audits(0.66, 5, 0.3)).rows[
        -1
    ].similarity == pytest.approx(0.675)
    # Well under the target, the bin below unknown or good: one bin down, not below 0.65.
    loosened = _step(tightened, _audits(0.68, 5, 0.0))
    assert loosened.rows[-1].similarity == pytest.approx(0.65)
    assert _step(loosened, _audits(0.66, 5, -0.1)).rows == NIRVANA_T2T.rows


def test_the_table_stays_valid_and_within_its_bounds_however_bad_every_bin_is() -> None:
    everything_bad = [
        Audit(round(0.6 + i * 0.01, 3), row.k, 0.5) for i in range(41) for row in NIRVANA_T2T.rows
    ] * 4
    table = NIRVANA_T2T
    for _ in range(10):
        table = _step(table, everything_bad)  # ThresholdTable's own checks: distinct, k grows with similarity
    for index, (row, base) in enumerate(zip(table.rows, NIRVANA_T2T.rows, strict=True)):
        assert base.similarity <= row.similarity <= 1.0 - index * BIN_WIDTH + 1e-9
        assert row.k == base.k
    assert table.rows[0].similarity == pytest.approx(1.0)  # no cosine passes '> 1': the largest k is off


def test_pushing_a_row_up_pushes_the_rows_of_larger_k_above_it() -> None:
    base = parse_table("0.9:20,0.8:10")
    served = {20: 20, 10: 10}
    audits = [Audit(round(0.8 + i * 0.01, 3), 10, 0.4) for i in range(15)] * 4
    decision = adjust(base, base, estimate(audits), served, CONFIG)
    low, high = decision.table.rows[1].similarity, decision.table.rows[0].similarity
    assert low == pytest.approx(0.95) and high == pytest.approx(0.975)
    assert [c.k for c in decision.changes] == [20, 10]


def test_the_estimate_is_a_window_of_each_bins_newest_audits() -> None:
    newest_first = _audits(0.70, 5, 0.0, n=WINDOW) + _audits(0.70, 5, 1.0, n=10)
    [only] = estimate(newest_first).values()
    assert (only.index, only.k, only.n, only.drop_mean) == (bin_of(0.70), 5, WINDOW, 0.0)
    assert only.lo == pytest.approx(0.7) and only.hi == pytest.approx(0.725)


def test_a_table_of_other_rows_is_refused() -> None:
    with pytest.raises(ValueError, match="does not have the rows"):
        adjust(parse_table("0.9:20"), NIRVANA_T2T, {}, SERVED, CONFIG)


def test_a_profiled_table_closer_than_a_bin_holds_until_an_estimate_moves_a_row() -> None:
    """The profiler may write rows 0.005 apart (lab-minilm): with nothing to act on the table stays as
    it is; a row tightened to or past the row above it pushes that row one bin above it."""
    close = parse_table("0.826:25,0.821:20,0.816:15")
    served = {row.k: row.k for row in close.rows}
    few = _audits(0.83, 25, 0.5, n=1)  # under the minimum sample
    assert not adjust(close, close, estimate(few), served, CONFIG).changed
    pushed = adjust(close, close, estimate(_audits(0.818, 15, 0.3)), served, CONFIG)
    assert pushed.changed
    lowest, middle, top = (row.similarity for row in reversed(pushed.table.rows))
    assert lowest > 0.821 and middle == pytest.approx(lowest + BIN_WIDTH) and top > middle
    assert [row.k for row in pushed.table.rows] == [25, 20, 15]


def test_a_row_short_of_a_sample_in_its_lowest_bin_acts_on_its_pooled_estimate() -> None:
    # The 0.65:5 row: its lowest bin holds 2 audits, its hits above it 3 more; its lowest four hits,
    # pooled over two bins, lose 0.125.
    audits = _audits(0.66, 5, 0.2, n=2) + _audits(0.70, 5, 0.05, n=2) + _audits(0.74, 5, 0.0, n=1)
    decision = adjust(NIRVANA_T2T, NIRVANA_T2T, estimate(audits), SERVED, CONFIG)
    [change] = decision.changes
    assert (change.k, change.reason, change.n) == (5, "tighten-pooled", 4)
    assert change.drop_mean == pytest.approx((2 * 0.2 + 2 * 0.05) / 4)
    assert change.new == pytest.approx(0.675)  # from 0.675 up, three audits: not known to exceed
    # Pooled within the target, or pooled short of the sample: nothing moves.
    fine = _audits(0.66, 5, 0.05, n=1) + _audits(0.70, 5, 0.0, n=4)
    assert not adjust(NIRVANA_T2T, NIRVANA_T2T, estimate(fine), SERVED, CONFIG).changed
    short = _audits(0.66, 5, 0.3, n=1) + _audits(0.70, 5, 0.3, n=2)
    assert not adjust(NIRVANA_T2T, NIRVANA_T2T, estimate(short), SERVED, CONFIG).changed
    # Audits of other k's never pool into the row's estimate.
    others = _audits(0.66, 5, 0.3, n=1) + _audits(0.70, 10, 0.3, n=8)
    assert not adjust(NIRVANA_T2T, NIRVANA_T2T, estimate(others), SERVED, CONFIG).changed


def test_the_lowest_hits_cannot_hide_behind_the_gains_of_exact_matches() -> None:
    # The 0.65:5 row serves hits from 0.66 to 0.79 that lose 0.15 and exact matches that gain 0.07: all
    # its hits together are within the target, its lowest are not. One pass takes it past every losing
    # bin (NIRVANA's Algorithm 1: the lowest similarity above which the hits hold), not one bin.
    losing = [a for s in (0.66, 0.69, 0.71, 0.74, 0.76, 0.79) for a in _audits(s, 5, 0.15)]
    audits = losing + _audits(0.99, 5, -0.07, n=60)
    assert sum(a.drop for a in audits) / len(audits) < CONFIG.target
    decision = adjust(NIRVANA_T2T, NIRVANA_T2T, estimate(audits), SERVED, CONFIG)
    change = decision.changes[-1]  # the row above it, 0.75:10, is pushed along
    assert (change.k, change.reason, change.n) == (5, "tighten", 4)
    assert change.drop_mean == pytest.approx(0.15)
    assert change.new == pytest.approx(0.8)
    # There it holds, and it does not come straight back down: the bins below are known to lose.
    assert not adjust(decision.table, NIRVANA_T2T, estimate(audits), SERVED, CONFIG).changed


def test_losses_above_the_lowest_hits_tighten_the_row_too() -> None:
    # The lowest hits are fine, but all the row's hits together lose: it rises until they hold.
    audits = _audits(0.66, 5, 0.0) + _audits(0.70, 5, 0.1, n=8) + _audits(0.80, 5, 0.0, n=4)
    decision = adjust(NIRVANA_T2T, NIRVANA_T2T, estimate(audits), SERVED, CONFIG)
    [change] = decision.changes
    assert (change.reason, change.n) == ("tighten-pooled", 16)
    assert change.drop_mean == pytest.approx(0.05)
    assert change.new == pytest.approx(0.725)  # past the losing bin at 0.70


def test_an_estimate_moves_a_row_only_a_standard_error_past_the_target() -> None:
    # Four audits averaging 0.05: spread evenly they are known to exceed 0.02, spread widely they are not.
    even = _audits(0.66, 5, 0.05)
    wide = _audits(0.66, 5, 0.35, n=2) + _audits(0.66, 5, -0.25, n=2)
    [narrow] = estimate(even).values()
    [spread] = estimate(wide).values()
    assert narrow.drop_mean == pytest.approx(spread.drop_mean) and narrow.standard_error == pytest.approx(0)
    assert spread.standard_error == pytest.approx(math.sqrt(0.09 / 3))  # their variance 0.09, over n - 1
    assert adjust(NIRVANA_T2T, NIRVANA_T2T, estimate(even), SERVED, CONFIG).changed
    assert not adjust(NIRVANA_T2T, NIRVANA_T2T, estimate(wide), SERVED, CONFIG).changed
